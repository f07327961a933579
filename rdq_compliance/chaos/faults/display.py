"""How the displays print the fault families' counts: each family's
:class:`~rdq_compliance.chaos.faults.family.Row`, by rank — the report's table and the
pytest summary line from the counters' ``as_dict()`` (as ``results.json`` and the JUnit
property carry them), the CLI's live table and summary from the live
:class:`~rdq_compliance.chaos.faults.counters.Counters`."""

from __future__ import annotations

from collections.abc import Mapping

from rdq_compliance.chaos.faults.combined import Families
from rdq_compliance.chaos.faults.counters import Counters
from rdq_compliance.chaos.faults.registry import BUILTIN


def report_rows(
    counts: Mapping[str, object], families: Families = BUILTIN
) -> list[tuple[str, object]]:
    """The report table's rows: ``(label, value)`` of each labelled count."""
    return [(row.label, counts.get(row.key)) for _, row in families.rows() if row.label]


def summary_words(counts: Mapping[str, object], families: Families = BUILTIN) -> list[str]:
    """The pytest summary line's ``"<value> <words>"`` of each count that is not 0."""
    return [
        f"{counts[row.key]} {row.summary}"
        for _, row in families.rows()
        if row.summary and counts.get(row.key)
    ]


def live_rows(counters: Counters) -> list[tuple[str, str]]:
    """The CLI's live table rows: ``(label, text)`` of each labelled count."""
    out = []
    for family, row in counters.families.rows():
        if row.label:
            counts = counters.of(family)
            out.append(
                (row.label, row.live(counts) if row.live else str(counts.as_dict()[row.key]))
            )
    return out


def fault_phrases(counters: Counters) -> list[str]:
    """The CLI summary's phrases, one per labelled count (and each count with ``said``)."""
    out = []
    for family, row in counters.families.rows():
        counts = counters.of(family)
        if row.said is not None:
            out.append(row.said(counts))
        elif row.label:
            out.append(f"{counts.as_dict()[row.key]} {row.label}")
    return out


def fault_details(counters: Counters) -> list[str]:
    """The lines the families add after the CLI summary's faults line."""
    return [line for family in counters.families for line in family.details(counters.of(family))]
