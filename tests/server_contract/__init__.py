"""The server contract: the self-tests every server backend shares — provisioning, a server
that is down, the clock-skew campaign, packaging — each written once as a body that takes
a :class:`~tests.server_contract.driver.ServerDriver` and run once per server backend
(postgres, redis, mongo — SecantusDB here, a MongoDB wire-protocol stand-in, not MongoDB —
and the MariaDB example ``mysql``), as River's ``riverdrivertest.Exercise`` runs one body
per driver.

- :mod:`.driver` — what a body may ask of a backend (its facts, in families);
- :mod:`.drivers` — the drivers (``tests/backends/<name>/driver.py``) and the
  ``@each(family)`` parametrization over them;
- ``conftest.py`` — a local-rung server and the shared server per driver, and a
  namespace on each (the process and timing helpers are :mod:`tests._processes`);
- ``test_provisioning.py``, ``test_server_down.py``, ``test_clock_skew.py``,
  ``test_packaging.py`` — the bodies.

What is truly one backend's (PostgreSQL's run-as-another-user cases, Redis Cluster's
slots, SecantusDB's stand-in quirks) stays in that backend's folder.
"""
