"""A PostgreSQL backend whose claim ignores the lease, for the deployed harness's tests on
a server the SSH test hosts reach over the network (a SQLite file is no server a host
reaches).

:data:`reclaim_ignores_lease`: the ``postgres`` backend (same rungs) whose claim, full and
fresh, also takes an IN_FLIGHT task claimed more than 0.5 s ago, whatever its lease:
the SQLite variant ``tests.broken.sqlite:reclaim_ignores_lease`` (bug class
``live-lease-stolen``) in PostgreSQL's statements. Workers import it by this module's
dotted name, so they need the checkout root on ``PYTHONPATH``.
"""

from __future__ import annotations

from typing import Any

import psycopg
from rdq_postgres import queries
from rdq_postgres.plugin import PostgresBackend
from rdq_postgres.storage import PostgresStorage

#: The reference claim's due condition, and the broken one.
_DUE = "due_at <= now()"
_STOLEN = "(due_at <= now() OR (status = 'IN_FLIGHT' AND claimed_at <= now() - interval '0.5 s'))"


def _stolen(template: str) -> str:
    assert template.count(_DUE) == 1, "nothing to break: the claim has no single due test"
    return template.replace(_DUE, _STOLEN)


class ReclaimIgnoresLeaseQueries(queries.Queries):
    """The claim and the fresh claim with the lease never read."""

    def __init__(self, schema: str) -> None:
        super().__init__(schema)
        self.claim = self._sql(_stolen(queries._CLAIM))
        self.claim_fresh = self._sql(
            _stolen(queries._CLAIM_FRESH),
            declined=psycopg.sql.SQL(", ".join(["NULL"] * queries.CLAIM_WIDTH)),
        )


class ReclaimIgnoresLease(PostgresStorage):
    """:class:`PostgresStorage` whose claims steal a live lease after 0.5 s."""

    def __init__(self, dsn: str, schema: str, **kwargs: Any) -> None:
        super().__init__(dsn, schema, **kwargs)
        self._q = ReclaimIgnoresLeaseQueries(self._source.schema)


class ReclaimIgnoresLeaseBackend(PostgresBackend):
    """The ``postgres`` backend (same rungs) opening :class:`ReclaimIgnoresLease`."""

    def open(self, dsn: str, namespace: str) -> PostgresStorage:
        return ReclaimIgnoresLease(dsn, namespace)


reclaim_ignores_lease = ReclaimIgnoresLeaseBackend()
