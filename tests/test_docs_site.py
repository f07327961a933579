"""The docs site: ``mkdocs build --strict`` builds it offline, its
reference pages are generated from the code, and the built home and chaos pages render
in headless Chromium with their headings and the timeline screenshot.

The Chromium check drives Debian's ``chromium`` through its ``chromedriver`` with
selenium (the driver named explicitly: nothing is downloaded). Without them it is
skipped with the reason, and fails under ``CI=true`` (``.ci/run`` installs both).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rdq_compliance import registry
from rdq_compliance.option_check import declared_keys
from rdq_compliance.rules import RULES
from tests._ci import missing
from tests._paths import ROOT

README_MAX_LINES = 150


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def _text(html: str) -> str:
    return re.sub(r"<[^>]+>", " ", html)


def test_the_site_builds_strict_and_needs_nothing_from_the_network(site: Path) -> None:
    pages = list(site.rglob("*.html"))
    assert len(pages) >= 20, pages
    for page in pages:
        html = page.read_text()
        external = re.findall(r'<(?:script|link|img)[^>]+(?:src|href)="(https?://[^"]+)"', html)
        assert not external, f"{page.relative_to(site)} loads {external[:3]}"


def test_the_reference_pages_are_generated_from_the_code(site: Path) -> None:
    rules = _text((site / "reference" / "rules.html").read_text())
    assert all(rule in rules for rule in RULES), [r for r in RULES if r not in rules]
    options = _text((site / "reference" / "options.html").read_text())
    for name in registry.installed():
        keys = declared_keys(registry.load_backend(name)) or set()
        assert all(k in options for k in keys), (name, [k for k in keys if k not in options])
    assert "mysql_bin_dir" in options  # the example's, from examples/
    api = _text((site / "reference" / "api.html").read_text())
    for name in ("claim_due", "_claim_due", "start_local_server", "ProcessSlot", "server_base"):
        assert name in api, name
    assert "(no docstring)" not in api
    caps = _text((site / "reference" / "capabilities.html").read_text())
    assert "lease_model" in caps and "not described in the docstring" not in caps


def test_the_readme_is_one_or_two_screens() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, len(lines)
    text = "\n".join(lines)
    assert "pip install -e '.[dev]'" in text and "pytest -n 4" in text
    assert "docs/img/timeline.png" in text


def _driver() -> Any:  # pragma: no cover - depends on the machine
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    chromedriver = shutil.which("chromedriver")
    absent = [n for n, p in (("chromium", chromium), ("chromedriver", chromedriver)) if not p]
    if absent:
        missing(f"{' and '.join(absent)} not installed (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)


@pytest.mark.parametrize(("page", "heading"), [("index.html", "rdq"), ("chaos.html", "Chaos")])
def test_the_built_page_shows_its_heading_and_the_timeline(
    site: Path, page: str, heading: str
) -> None:
    driver = _driver()
    try:
        driver.get((site / page).as_uri())
        h1 = driver.execute_script("return document.querySelector('article h1')?.innerText")
        assert h1 and heading.lower() in h1.lower(), h1
        images = driver.execute_script(
            "return [...document.querySelectorAll('article img')]"
            ".map(i => [i.getAttribute('src'), i.complete, i.naturalWidth])"
        )
        timeline = [i for i in images if i[0].endswith("img/timeline.png")]
        assert timeline, images
        assert all(done and width >= 600 for _, done, width in timeline), timeline
        shown = driver.execute_script(
            "const i = [...document.querySelectorAll('article img')]"
            ".find(i => i.getAttribute('src').endsWith('img/timeline.png'));"
            "const r = i.getBoundingClientRect(); return [r.width, r.height];"
        )
        assert shown[0] > 300 and shown[1] > 100, shown
    finally:
        driver.quit()
