"""MkDocs hooks of the docs site (``mkdocs.yml``): the reference pages are generated from
the code at build time, never retyped.

A page asks for a generated block with a marker line, ``<!-- rdq:NAME -->``:

- ``rules``: every rule id of :data:`rdq_compliance.rules.RULES` with its text;
- ``settings``: :data:`rdq_compliance.settings.SOURCES`, each setting by source;
- ``options``: every ``--rdq-option`` key each installed backend (and each backend of
  ``examples/``) declares (:meth:`Backend.options`), with type, default and meaning;
- ``capabilities``: the fields of :class:`rdq_core.model.Capabilities`, their defaults
  and their docstring entries;
- ``api``: the public interfaces a backend author builds on, each class with its
  signature and every method's signature and first docstring line.

An unknown marker fails the build (``mkdocs build --strict`` sees the error).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
_MARKER = re.compile(r"^<!-- rdq:([a-z]+) -->$", re.M)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(f"{page.file.src_path}: unknown generated block {name!r}")
        return GENERATORS[name]()

    return _MARKER.sub(fill, markdown)


def _rst(text: str) -> str:
    """reST inline markup of a docstring as markdown: ``x`` -> `x`, :role:`x` -> `x`."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", text)
    text = text.replace("``", "`")
    return " ".join(text.split())


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def rules() -> str:
    from rdq_compliance.rules import RULES

    rows = ["| rule id | what it holds |", "|---|---|"]
    rows += [f"| `{rule}` | {_cell(text)} |" for rule, text in RULES.items()]
    return "\n".join(rows) + f"\n\n{len(RULES)} rules."


def settings() -> str:
    from rdq_compliance.settings import SOURCES

    rows = ["| setting | command line | environment | `pyproject.toml` |", "|---|---|---|---|"]
    for setting, cli, env, toml in SOURCES:
        rows.append(f"| {setting} | {_cell(cli)} | {_cell(env)} | {_cell(toml)} |")
    return "\n".join(rows)


def _example_backends() -> Iterator[tuple[str, str]]:
    """``(name, module:attr)`` of each ``rdq.backends`` entry point in ``examples/*``.
    An example is not installed with the kit: its top package is loaded from its folder
    (registered in ``sys.modules``, its submodules found through its ``__path__``)."""
    for pyproject in sorted(ROOT.glob("examples/*/pyproject.toml")):
        data = tomllib.loads(pyproject.read_text())
        points = data.get("project", {}).get("entry-points", {}).get("rdq.backends", {})
        for name, target in points.items():
            top = target.partition(":")[0].split(".")[0]
            _load_package(top, pyproject.parent / top)
            yield name, target


def _load_package(name: str, folder: Path) -> None:
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(
        name, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the example package {name} from {folder}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


def _backends() -> Iterator[tuple[str, Any]]:
    from rdq_compliance import registry

    seen = set()
    for name in sorted(registry.installed()):
        seen.add(name)
        yield name, registry.load_backend(name)
    for name, target in _example_backends():
        if name not in seen:
            yield f"{name} (`{target.partition(':')[0].split('.')[0]}`, in examples/)", (
                registry.load_backend(target)
            )


def options() -> str:
    out = []
    for name, backend in _backends():
        rungs = backend.options()
        if rungs is None:
            out.append(f"### {name}\n\nDoes not declare its options.\n")
            continue
        keys = {}
        for rung in rungs:
            for opt in rung:
                keys.setdefault(opt.name, (opt, []))[1].append(rung.rung)
        if not keys:
            out.append(f"### {name}\n\nTakes no options.\n")
            continue
        rows = ["| key | read by | expects | default | meaning |", "|---|---|---|---|---|"]
        for key, (opt, where) in sorted(keys.items()):
            rows.append(
                f"| `{key}` | {', '.join(where)} | {_cell(opt.expected())} | "
                f"{_cell(opt.show_default())} | {_cell(opt.help)} |"
            )
        out.append(f"### {name}\n\n" + "\n".join(rows) + "\n")
    return "\n".join(out)


def _entries(doc: str) -> dict[str, str]:
    """The ``- ``name``: text`` entries of a docstring's list, by name."""
    entries: dict[str, str] = {}
    current = None
    for line in doc.splitlines():
        match = re.match(r"\s*- ``(\w+)``: (.*)", line)
        if match:
            current = match.group(1)
            entries[current] = match.group(2)
        elif current and line.strip() and line.startswith("  "):
            entries[current] += " " + line.strip()
        else:
            current = None
    return {k: _rst(v) for k, v in entries.items()}


def capabilities() -> str:
    from rdq_core.model import Capabilities

    entries = _entries(inspect.getdoc(Capabilities) or "")
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for f in dataclasses.fields(Capabilities):
        default = f.default if f.default is not dataclasses.MISSING else "(required)"
        rows.append(
            f"| `{f.name}` | `{_cell(str(f.type))}` | `{default!r}` | "
            f"{_cell(entries.get(f.name, 'not described in the docstring'))} |"
        )
    return "\n".join(rows)


def _first_line(obj: object) -> str:
    doc = inspect.getdoc(obj) or ""
    para = doc.split("\n\n")[0]
    return _rst(para) or "(no docstring)"


def _signature(obj: Callable[..., Any]) -> str:
    """``obj``'s signature with its annotations as written (postponed annotations are
    evaluated where they can be, else shown without their quotes)."""
    try:
        return str(inspect.signature(obj, eval_str=True))
    except (NameError, TypeError, SyntaxError):
        pass
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    params = [
        p.replace(annotation=_unquoted(p.annotation)) for p in sig.parameters.values()
    ]
    return str(sig.replace(parameters=params, return_annotation=_unquoted(sig.return_annotation)))


class _Written:
    """An annotation shown as its source text (``repr`` without quotes)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _unquoted(annotation: object) -> object:
    return _Written(annotation) if isinstance(annotation, str) else annotation


#: The interfaces of the backend-author page: (module, names; "*" for its __all__).
API: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("rdq_core.spi", ("Storage",)),
    ("rdq_compliance.provision.backend", (
        "Backend", "Server", "ProvisionRequest", "StorageSpec", "ProvisionUnavailable",
        "UnsupportedFault",
    )),
    ("rdq_compliance.provision.local_server", ("ProcessSlot", "LocalFaults", "start_rung")),
    ("rdq_compliance.provision.process", ("ManagedProcess", "ProcessFailed")),
    ("rdq_compliance.provision.users", ("server_base", "server_user", "RunAs")),
    ("rdq_compliance.provision.options", ("option", "RungOptions", "Paths")),
    ("rdq_compliance.provision.admin", ("AdminHandle",)),
    ("rdq_compliance.provision.owners", ("owner_record", "Owner")),
    ("rdq_compliance.provision.ports", ("free_port", "port_open", "start_on_free_port")),
    ("rdq_compliance.provision.binaries", ("find_binary", "find_binaries")),
    ("rdq_compliance.registry", ("load_backend", "installed")),
    ("rdq_compliance.settings", ("resolve", "Settings")),
    ("rdq_compliance.session", ("Session",)),
    ("rdq_core.errors", ("*",)),
    ("rdq_core.masking", ("mask_dsn",)),
    ("rdq_core.cursor", ("encode", "decode", "DlqPosition")),
    ("rdq_core.tokens", ("new_token",)),
)  # fmt: skip


def _members(cls: type) -> Iterator[tuple[str, Any]]:
    abstract = getattr(cls, "__abstractmethods__", frozenset())
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    for name, value in vars(cls).items():
        if name in fields:  # a dataclass field: in the class's signature
            continue
        if name.startswith("__") or (not callable(value) and not isinstance(value, property)):
            continue
        if name.startswith("_") and name not in abstract:
            continue
        yield name, value


def _class_block(module: str, cls: type) -> list[str]:
    lines = [f"### `{module}.{cls.__name__}`", ""]
    if not issubclass(cls, BaseException):
        lines += [f"```python\nclass {cls.__name__}{_signature(cls)}\n```", ""]
    lines += [_first_line(cls), ""]
    abstract = getattr(cls, "__abstractmethods__", frozenset())
    for name, value in _members(cls):
        func = value.fget if isinstance(value, property) else inspect.unwrap(value)
        if isinstance(value, (staticmethod, classmethod)):
            func = value.__func__
        must = " **(implement)**" if name in abstract else ""
        sig = "" if isinstance(value, property) else _signature(func)
        doc = _first_line(func)
        public = getattr(cls, name.lstrip("_"), None) if name.startswith("_") else None
        if doc == "(no docstring)" and public is not None:
            doc = f"implements `{name.lstrip('_')}`: {_first_line(public)}"
        lines.append(f"- `{name}{sig}`{must}: {doc}")
    return [*lines, ""]


def api() -> str:
    out: list[str] = []
    for module_name, names in API:
        module = importlib.import_module(module_name)
        chosen = list(getattr(module, "__all__", ())) if names == ("*",) else list(names)
        for name in chosen:
            obj = getattr(module, name)
            if inspect.isclass(obj):
                out += _class_block(module_name, obj)
            else:
                out += [
                    f"### `{module_name}.{name}`",
                    "",
                    f"```python\ndef {name}{_signature(obj)}\n```",
                    "",
                    _first_line(obj),
                    "",
                ]
    return "\n".join(out)


GENERATORS: dict[str, Callable[[], str]] = {
    "rules": rules,
    "settings": settings,
    "options": options,
    "capabilities": capabilities,
    "api": api,
}
