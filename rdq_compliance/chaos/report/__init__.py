"""The report folder of a chaos campaign, one module per output.

::

    <out>/
      history/*.jsonl     the journals (one per worker process, and harness.jsonl)
      results.json        summary: scenario, seed, backend, counters, tasks, violations
      seed.txt            the seed and the exact command that replays the run
      final-state.jsonl   every enqueued task as the storage holds it at the end
      timeline.html       workers as lanes, claims as bars, faults marked (open it)
      junit.xml           one testcase per checker rule (or one failed "checker" case
                          if the checker raised)
      logs/*.log          each worker process's stderr

- :mod:`~rdq_compliance.chaos.report.folder`: :func:`write_report` writes the folder
  (``results.json``, ``seed.txt``, ``final-state.jsonl``, and the two below);
- :mod:`~rdq_compliance.chaos.report.timeline`: the history as lanes, bars and fault
  marks (:func:`build_timeline`);
- :mod:`~rdq_compliance.chaos.report.html`: ``timeline.html`` (:func:`render_timeline`);
- :mod:`~rdq_compliance.chaos.report.junit`: ``junit.xml`` (:func:`render_junit`).
"""

from rdq_compliance.chaos.report.folder import results_data, write_report
from rdq_compliance.chaos.report.html import render_timeline
from rdq_compliance.chaos.report.junit import render_junit
from rdq_compliance.chaos.report.timeline import Bar, Mark, build_timeline

__all__ = [
    "Bar",
    "Mark",
    "build_timeline",
    "render_junit",
    "render_timeline",
    "results_data",
    "write_report",
]
