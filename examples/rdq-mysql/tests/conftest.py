"""Nothing to see here: the rdq pytest plugin adds the kit's whole suite (conformance,
the stateful machine, chaos) to this folder's run. The settings are in ``[tool.rdq]`` of
../pyproject.toml (``backend = "mysql"``); give a server with ``--rdq-dsn`` or
``RDQ_MYSQL_DSN``, else the kit starts one from local binaries or a container."""
