"""Make ``_sqlite_workers`` importable here and in spawned children, whatever the
``--import-mode`` (``importlib`` mode puts nothing on ``sys.path``)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
