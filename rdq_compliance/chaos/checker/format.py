"""How the checker words what it saw: storage times, claims and attempts as text, one
timeline line per event, and the timeline excerpt of a task (the events a violation
shows, cut from the history)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Any

from rdq_compliance.chaos.checker.index import (
    CLAIM,
    ENQUEUE,
    REDRIVE,
    HistoryIndex,
    JournalClaim,
    TokenRecord,
    event_tasks,
)
from rdq_compliance.chaos.checker.view import Att
from rdq_compliance.chaos.events import Event
from rdq_core.model import UTC, utc_from_micros

#: The most events an excerpt shows.
EXCERPT_EVENTS = 14

# ---- words -------------------------------------------------------------------------------------


def storage_time(us: int) -> str:
    """A storage time (µs since the epoch) as ``HH:MM:SS.ffffff`` UTC."""
    return utc_from_micros(us).strftime("%H:%M:%S.%f")


def ms(us: int) -> str:
    """A duration in µs as milliseconds."""
    return f"{us / 1000:.3f} ms"


def claim_desc(c: JournalClaim) -> str:
    """``the claim of PROC (token T, claimed at HH:MM:SS.ffffff)``."""
    return f"the claim of {c.proc} (token {c.token}, claimed at {storage_time(c.claimed_at)})"


def att_desc(a: Att) -> str:
    """``attempt N OUTCOME [started .. finished]``."""
    return (
        f"attempt {a[0]} {a[3].value} "
        f"[{storage_time(a[1])} .. {storage_time(a[2])}]"
    )


def ops_desc(tok: TokenRecord | None) -> str:
    """The outcome operations called with a token (``complete/dead_letter``), or
    ``outcome`` if none is known."""
    if tok is None or not tok.out_ops:
        return "outcome"
    return "/".join(sorted(tok.out_ops))


# ---- timeline lines ----------------------------------------------------------------------------


def _wall(t: object) -> str:
    if isinstance(t, (int, float)) and not isinstance(t, bool):
        try:
            return datetime.fromtimestamp(float(t), UTC).strftime("%H:%M:%S.%f")
        except (OverflowError, OSError, ValueError):
            pass
    return "?" * 15


def _short(token: object) -> str:
    return token[:12] if isinstance(token, str) else repr(token)


_STORAGE_FIELDS = frozenset({"claimed_at", "lease_expires_at"})
_HIDDEN = frozenset({"seq", "proc", "pid", "t", "type", "op", "task", "token", "claims"})


def format_event(ev: dict[str, Any]) -> str:
    """One timeline line: wall time, process, type, op, then the interesting fields
    (tokens shortened, storage times as ``HH:MM:SS.ffffff``)."""
    head = f"{_wall(ev.get('t'))}  {ev.get('proc', '?')!s:<8} {ev.get('type', '?')!s:<6} "
    head += f"{ev.get('op', '?')!s:<11}"
    parts: list[str] = []
    if "token" in ev:
        parts.append(f"token={_short(ev['token'])}")
    for entry in ev.get("claims") or ():
        if not isinstance(entry, dict):
            continue
        bits = [f"token={_short(entry.get('token'))}"]
        for key in ("claimed_at", "lease_expires_at"):
            value = entry.get(key)
            if isinstance(value, int):
                bits.append(f"{key}={storage_time(value)}")
        for key in ("reclaimed", "attempt_no", "attempt_count"):
            if key in entry:
                bits.append(f"{key}={entry[key]}")
        parts.append(" ".join(bits))
    for key, value in ev.items():
        if key in _HIDDEN:
            continue
        if key in _STORAGE_FIELDS and isinstance(value, int):
            parts.append(f"{key}={storage_time(value)}")
        else:
            parts.append(f"{key}={value}")
    return (head + " " + "; ".join(parts)).rstrip()


# ---- excerpts ----------------------------------------------------------------------------------


def _trimmed(ev: Event, task: str) -> dict[str, Any]:
    out = dict(ev)
    if isinstance(ev.get("claims"), list):
        out["claims"] = [e for e in ev["claims"] if isinstance(e, dict) and e.get("task") == task]
    if isinstance(ev.get("tasks"), list):
        out["tasks"] = [t for t in ev["tasks"] if t == task]
    return out


def _tokens_of(ev: Event, task: str) -> set[str]:
    toks: set[str] = set()
    token = ev.get("token")
    if isinstance(token, str):
        toks.add(token)
    if ev.get("op") == CLAIM:
        for entry in ev.get("claims") or ():
            if isinstance(entry, dict) and entry.get("task") == task:
                t = entry.get("token")
                if isinstance(t, str):
                    toks.add(t)
    return toks


def _sort_key(events: Sequence[Event]) -> Callable[[int], tuple[float, str, int]]:
    def key(i: int) -> tuple[float, str, int]:
        ev = events[i]
        t = ev.get("t")
        seq = ev.get("seq")
        return (
            float(t) if isinstance(t, (int, float)) else 0.0,
            str(ev.get("proc", "")),
            seq if isinstance(seq, int) else i,
        )

    return key


def task_events(ix: HistoryIndex, tasks: Collection[str]) -> dict[str, list[int]]:
    """The positions of the events that concern each of ``tasks`` (one pass)."""
    per_task: dict[str, list[int]] = {t: [] for t in tasks}
    if not per_task:
        return per_task
    for i, ev in enumerate(ix.events):
        for t in event_tasks(ev):
            lst = per_task.get(t)
            if lst is not None and (not lst or lst[-1] != i):
                lst.append(i)
    return per_task


def excerpt(
    ix: HistoryIndex,
    positions: Sequence[int],
    task: str,
    *,
    workers: Collection[str],
    focus: frozenset[str],
    anchor: int | None,
) -> tuple[dict[str, Any], ...]:
    """At most :data:`EXCERPT_EVENTS` events of ``task`` (``positions``, from
    :func:`task_events`) in wall-time order, each trimmed to that task: those of the
    ``focus`` tokens (every one if no focus) and the task's enqueues and redrives, with
    the faults that hit ``workers`` meanwhile; centred on the ``anchor`` event when
    there are more."""
    events = ix.events
    key = _sort_key(events)
    chosen = [
        i
        for i in positions
        if not focus
        or events[i].get("op") in (ENQUEUE, REDRIVE)
        or _tokens_of(events[i], task) & focus
    ]
    chosen.sort(key=key)
    if chosen and workers:
        lo, hi = key(chosen[0])[0], key(chosen[-1])[0]
        targets = set(workers)
        for i in ix.faults:
            ev = events[i]
            if (ev.get("target") in targets or ev.get("proc") in targets) and (
                lo <= key(i)[0] <= hi
            ):
                chosen.append(i)
        chosen.sort(key=key)
    if len(chosen) > EXCERPT_EVENTS:
        if anchor is not None and anchor in chosen:
            at = chosen.index(anchor)
            start = max(0, min(at - EXCERPT_EVENTS // 2, len(chosen) - EXCERPT_EVENTS))
        else:
            start = len(chosen) - EXCERPT_EVENTS
        chosen = chosen[start : start + EXCERPT_EVENTS]
    return tuple(_trimmed(events[i], task) for i in chosen)
