"""Shared set-up of the kit's own tests.

``pytester`` runs the conformance suite inside these tests. The deliberately broken
backends live in ``tests/rdq_broken_backends.py`` and are named to the suite as
``--rdq-backend=rdq_broken_backends:<attribute>``, so this folder must be importable:
it is put on ``sys.path`` here, explicitly, so it does not depend on pytest's
``--import-mode`` (``importlib`` mode adds nothing to ``sys.path``).
"""

from __future__ import annotations

import sys
from pathlib import Path

pytest_plugins = ["pytester"]

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))
