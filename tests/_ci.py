"""What a test does when something it needs is missing: skip with the reason, except on
CI (``CI=true``), where a missing server or tool is a failure, never a silent skip."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def missing(reason: str) -> NoReturn:
    """Skip saying ``reason``; under ``CI=true``, fail saying it instead."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: a failure, not a skip)")
    pytest.skip(reason)
