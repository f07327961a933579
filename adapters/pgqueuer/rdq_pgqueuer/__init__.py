"""The kit on pgqueuer (https://github.com/janbjorge/pgqueuer), a PostgreSQL job queue:
an adapter whose every write is pgqueuer's own (``rdq[pgqueuer]`` pins the release)."""
