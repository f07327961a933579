"""The third-party path from the docs alone: ``tests/docs_toy/rdq_toy.py`` is a backend
written from docs/writing-a-backend.md and the generated public interfaces page only.
Every kit name it imports must be named there (checked against the pages' text, and
shown to catch a name that is not), the kit's conformance suite passes on it as a third
party runs it, and the sweep drops what a SIGKILLed run of it left.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from rdq_compliance.session import Session
from rdq_compliance.settings import resolve
from tests._paths import ROOT, pythonpath

TOY = ROOT / "tests" / "docs_toy"
PAGE = ROOT / "docs" / "writing-a-backend.md"


def docs_text() -> str:
    """The backend-author page and the public interfaces page as the site builds it."""
    spec = importlib.util.spec_from_file_location(
        "rdq_mkdocs_hooks", ROOT / "tools" / "mkdocs_hooks.py"
    )
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return PAGE.read_text() + "\n" + hooks.api()


def undocumented(source: str, text: str) -> list[str]:
    """The kit names ``source`` imports that the docs' ``text`` does not name: a module
    that is not named, or a name that is in no code span (inline or fenced)."""
    fenced = re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.S)
    inline = re.sub(r"```[^\n]*\n.*?```", "", text, flags=re.S)
    spans = [*fenced, *re.findall(r"`([^`]+)`", inline)]
    missing = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rdq_"):
            module = node.module or ""
            if not any(module == s or s.startswith(module + ".") for s in spans):
                missing.append(f"module {module}")
            for alias in node.names:
                word = re.compile(rf"(^|[^\w]){re.escape(alias.name)}($|[^\w])")
                if not any(word.search(s) for s in spans):
                    missing.append(f"{module}.{alias.name}")
        elif isinstance(node, ast.Import):
            missing += [f"module {a.name}" for a in node.names if a.name.startswith("rdq_")]
    return missing


def test_every_kit_name_the_toy_imports_is_on_the_docs_pages() -> None:
    text = docs_text()
    assert undocumented((TOY / "rdq_toy.py").read_text(), text) == []
    # the check catches what the pages do not name
    crafted = (
        "from rdq_compliance.provision.netns import sweep_stale\n"
        "from rdq_compliance.provision import Backend, _watchdog\n"
        "import rdq_compliance.chaos\n"
    )
    assert undocumented(crafted, text) == [
        "module rdq_compliance.provision.netns",
        "rdq_compliance.provision.netns.sweep_stale",
        "rdq_compliance.provision._watchdog",
        "module rdq_compliance.chaos",
    ]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RDQ_")}
    env["PYTHONPATH"] = pythonpath(os.pathsep.join([str(TOY), os.environ.get("PYTHONPATH", "")]))
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def test_the_kit_passes_on_the_toy_as_a_third_party_runs_it(tmp_path: Path) -> None:
    server = tmp_path / "server"
    server.mkdir()
    (tmp_path / "test_own.py").write_text("def test_their_own_test():\n    pass\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "--rdq-backend=rdq_toy:backend", f"--rdq-dsn=toy://{server}",
         "--rdq-option", "toy_prefix=t_", "-m", "not chaos and not stateful",
         "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    passed = int(re.search(r"(\d+) passed", out).group(1))  # type: ignore[union-attr]
    assert passed > 300, out[-3000:]
    assert "failed" not in out.splitlines()[-1], out[-3000:]
    assert "toy 1 (the reference store per namespace)" in out
    assert list(server.iterdir()) == [], "the run left namespaces behind"


def test_a_killed_run_of_the_toy_is_swept_by_the_next(tmp_path: Path) -> None:
    dsn = f"toy://{tmp_path}"
    code = (
        "import time\n"
        "from rdq_compliance.session import Session\n"
        "from rdq_compliance.settings import resolve\n"
        f"s = Session(resolve(cli_backend='rdq_toy:backend', cli_dsn={dsn!r}))\n"
        "s.start()\n"
        "print(s.create_namespace().namespace, flush=True)\n"
        "time.sleep(120)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], env=_env(), stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    namespace = child.stdout.readline().strip()
    assert (tmp_path / namespace / "owner").exists()
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    with Session(resolve(cli_backend="rdq_toy:backend", cli_dsn=dsn)) as session:
        swept = session.swept  # rdq_toy is on pytest's pythonpath (pyproject.toml)
    assert swept is not None and list(swept.dropped) == [namespace], swept
    assert f"pid {child.pid} on" in (swept.summary() or "")
    assert not (tmp_path / namespace).exists()
