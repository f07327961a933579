"""Where the checkout is, and the ``PYTHONPATH`` of a process a test spawns.

The kit's own tests import their helpers and broken backends by dotted name
(``tests.broken.sqlite:check_then_act_claim``); pytest finds them from the checkout root
(``pythonpath`` in ``[tool.pytest.ini_options]``). A process a test starts — a chaos
worker importing the backend it is named, a ``pytest`` run in a temporary folder — does
not read those settings: it gets the checkout root first on its ``PYTHONPATH``.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The checkout (the folder holding ``tests/`` and ``pyproject.toml``).
ROOT = Path(__file__).resolve().parent.parent


def pythonpath(current: str | None = None) -> str:
    """``current`` (a ``PYTHONPATH`` value, or nothing) with the checkout root first."""
    parts = [p for p in (current or "").split(os.pathsep) if p and p != str(ROOT)]
    return os.pathsep.join([str(ROOT), *parts])
