"""The kit on procrastinate (https://github.com/procrastinate-org/procrastinate), a
PostgreSQL task queue: an adapter whose every write is procrastinate's own
(``rdq[procrastinate]`` pins the release)."""
