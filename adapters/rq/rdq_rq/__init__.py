"""The kit on RQ (https://github.com/rq/rq), a Redis job queue: an adapter whose every
write is RQ's own (``rdq[rq]`` pins the release)."""
