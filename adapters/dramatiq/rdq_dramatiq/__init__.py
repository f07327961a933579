"""The kit on dramatiq's Redis broker (https://github.com/Bogdanp/dramatiq): an adapter whose
every write is dramatiq's own (``rdq[dramatiq]`` pins the release)."""
