"""The control's worker process with no handler under the name its jobs ask for.

::

    python -m tests.deployed.handlerless_worker [the options of rdq_compliance.deployed.core_worker]

is :mod:`rdq_compliance.deployed.core_worker` whose loop registers the probe's handler
under another name than the one the control's jobs name: rdq's worker dead-letters every
job it claims (``rdq.UnknownHandler``, ``rdq_core/worker.py``) before any handler runs,
as a library fails every job whose handler its worker cannot import. The probe journals
nothing. Run by :class:`tests.deployed.broken_control.HandlerMissing`.
"""

from __future__ import annotations

import sys

from rdq_compliance.deployed import core_worker

#: The name the loop registers the handler under: not the control's ``probe``.
ELSEWHERE = "probe-not-importable"

if __name__ == "__main__":
    core_worker.HANDLER = ELSEWHERE  # the loop core_worker.main builds knows only this name
    sys.exit(core_worker.main())
