"""rdq-mysql: an rdq storage backend for MariaDB 10.6+ and MySQL 8 (an example of a
third-party backend built only from the kit's public surface).

One database per namespace; claims with ``SELECT … FOR UPDATE SKIP LOCKED``; every time
is the server's clock (``NOW(6)``) as integer microseconds. Driver: PyMySQL (pure
Python). Registered as the ``mysql`` entry point of ``rdq.backends``
(:mod:`rdq_mysql.plugin`).

**Two halves.** The *storage half* — :mod:`~rdq_mysql.storage` (:class:`MySqlStorage`)
and what it needs: ``dsn``, ``connection``, ``schema``, ``errors`` — imports only
:mod:`rdq_core` and PyMySQL: an application uses it without the kit. The *plugin half* —
``plugin``, ``server``, ``local``, ``container``, ``options`` — imports
:mod:`rdq_compliance.provision` and the storage half. This ``__init__`` imports neither.
"""
