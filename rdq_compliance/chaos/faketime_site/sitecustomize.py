"""The kit's ``sitecustomize`` for a Python process run under libfaketime.

A process whose environment puts this folder first on ``PYTHONPATH`` imports this module
when Python starts (``site`` imports ``sitecustomize``), before any of its own code. With
``RDQ_PATCH_SLEEP=1`` it replaces ``time.sleep`` by a timed wait on the real monotonic
clock (:func:`rdq_compliance.chaos.libfaketime.patch_sleep`): libfaketime 0.9.10 makes
Python's ``time.sleep`` fail with ``EINVAL`` when the monotonic clock is left true
(``wolfcw/libfaketime#426``), and a queue library's own worker sleeps with it. Nothing
else of the process changes. Then the next ``sitecustomize`` on the path (the
interpreter's own, if it has one) runs as it would have.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys


def _patch() -> None:
    if os.environ.get("RDQ_PATCH_SLEEP") != "1":
        return
    try:
        from rdq_compliance.chaos.libfaketime import patch_sleep
    except ImportError:  # the kit is not importable here: the process runs unpatched
        return
    patch_sleep()


def _chain() -> None:
    """Run the next ``sitecustomize`` on ``sys.path`` after this folder."""
    here = os.path.dirname(os.path.abspath(__file__))
    later = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", later)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_patch()
_chain()
