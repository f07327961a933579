"""The claim's search window: how far past the queue's head a candidate find looks
(storage half).

SecantusDB answers a find in time proportional to the documents its filter matches, sort
and limit notwithstanding (≈35 µs each: 40 ms with 1,000 due tasks), so a claim on a
long backlog would cost a scan of the whole backlog. The candidates are therefore looked
for among tasks due by ``bound = min(T, head + width)`` (``head``: the earliest due time
the last find saw; ``width``: adapted per queue), widening the window until it yields
the candidates asked for or reaches ``T``.

**Correctness does not depend on the guess.** The filter is ``due_us ≤ bound`` (open
below, so a task due before ``head`` — back-dated, or an older expired lease — is always
in it). If it yields at least ``n`` tasks, they are the ``n`` earliest-due claimable tasks
overall, since every task outside has ``due_us > bound``; if it yields fewer and
``bound < T`` the window is made four times as wide and the find repeated; with
``bound = T`` it is the plain "everything due" find. A width shrinks by a quarter after
each search its first find satisfied, so the window follows the backlog. On MongoDB,
whose index scan stops at the limit, the window costs at most one or two extra finds
after a backlog is drained.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

#: The first width of a queue's window, in microseconds of due time.
INITIAL_WIDTH_US = 50_000
MIN_WIDTH_US = 1_000
#: Finds one candidate search may make before it looks at everything due.
MAX_WIDENINGS = 8

#: ``find(bound_us, n)`` -> the ``(id, due_us)`` of up to ``n`` tasks due by ``bound_us``,
#: in due order.
Find = Callable[[int, int], list[tuple[str, int]]]


class Windows:
    """Per-queue windows of one storage handle (hints only; shared by its threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hints: dict[str, tuple[int, int]] = {}  # queue -> (head_us, width_us)

    def candidates(self, queue: str, now_us: int, wanted: int, find: Find) -> list[str]:
        """Ids of the ``wanted`` earliest-due tasks claimable at ``now_us`` (fewer if
        there are fewer), in due order."""
        with self._lock:
            hint = self._hints.get(queue)
        head, width = hint if hint is not None else (None, INITIAL_WIDTH_US)
        widened = False
        for _ in range(MAX_WIDENINGS):
            bound = now_us if head is None else min(now_us, head + width)
            found = find(bound, wanted)
            if len(found) >= wanted or bound >= now_us:
                break
            width, widened = width * 4, True
        else:
            found = find(now_us, wanted)
        if not widened:
            width = max(MIN_WIDTH_US, width * 3 // 4)
        with self._lock:
            if found:
                self._hints[queue] = (found[0][1], width)
            else:
                self._hints.pop(queue, None)
        return [task_id for task_id, _ in found]
