"""Reading back the JUnit report of a suite run made in a pytest subprocess."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path


def read_junit(path: Path) -> tuple[list[str], dict[str, str]]:
    """(the passed tests, the failed ones with their failure text), each keyed
    ``module.py::test[params]``; a skipped test is in neither."""
    passed: list[str] = []
    failed: dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        key = f"{case.get('classname', '').rpartition('.')[2]}.py::{case.get('name')}"
        problems = [el for el in case if el.tag in ("failure", "error")]
        if problems:
            failed[key] = "\n".join(f"{el.get('message', '')}\n{el.text or ''}" for el in problems)
        elif not any(el.tag == "skipped" for el in case):
            passed.append(key)
    return passed, failed
