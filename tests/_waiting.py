"""The wall-clock bound of a wait in the kit's own tests that is only a hang guard.

A test judges the kit, not the machine. A wait for an event that comes on every healthy
run (a process exits, a line is printed, a thread ends, a port opens, a worker is gone)
ends when the event happens, so its bound costs nothing on a passing run and only says
when to stop waiting for an event that will never come. :data:`HANG_S` is that bound:
far above what any such wait takes on a busy 2-core runner (each takes under 10 s there),
so exceeding it means a real hang, not a slow machine.

A bound that is itself the subject of a test (a lease, a grace period, a fail-fast
promise) is not a hang guard: it stays beside the test with its reason.
"""

from __future__ import annotations

#: Seconds a test waits for an event that does come on a healthy run before it calls the
#: wait a hang.
HANG_S = 120.0
