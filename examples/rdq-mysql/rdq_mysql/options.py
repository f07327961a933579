"""The ``--rdq-option`` settings of the mysql rungs, declared once (plugin half), parsed by
the kit's shared parser (``rdq_compliance.provision.option``/``RungOptions``).

===========================  ============================================================
``mysql_bin_dir``            folders (``os.pathsep``-separated) holding ``mariadbd`` (or
                             ``mysqld``) and ``mariadb-install-db`` (or
                             ``mysql_install_db``); searched *instead of* ``PATH`` and the
                             usual folders — local rung
``mysql_user``               the system user to run the server as when we are root
                             (``mysql``) — local rung
``mysql_max_connections``    ``max_connections`` of the server (300) — both rungs
``mysql_start_timeout``      seconds to wait for the server to answer (60) — both rungs
``mysql_image``              the container image (``mariadb:10.11``) — container rung
``mysql_network``            ``auto``, ``host`` or ``published`` — container rung
===========================  ============================================================
"""

from __future__ import annotations

from rdq_compliance.provision import Paths, RungOptions, option

DEFAULT_OS_USER = "mysql"
#: The official MariaDB image, the current long-term release.
DEFAULT_IMAGE = "mariadb:10.11"

MYSQL_BIN_DIR = option(
    "mysql_bin_dir",
    Paths,
    None,
    "folders holding mariadbd (or mysqld) and mariadb-install-db, searched instead of PATH "
    "and the usual folders",
)
MYSQL_USER = option(
    "mysql_user", str, DEFAULT_OS_USER, "the system user to run the server as when we are root"
)
MYSQL_MAX_CONNECTIONS = option(
    "mysql_max_connections", int, 300, "max_connections of the server", positive=True
)
MYSQL_START_TIMEOUT = option(
    "mysql_start_timeout", float, 60.0, "seconds to wait for the server to answer", positive=True
)
MYSQL_IMAGE = option("mysql_image", str, DEFAULT_IMAGE, "the container image")
MYSQL_NETWORK = option(
    "mysql_network", str, "auto", "the container's network mode: auto, host or published"
)

LOCAL_OPTIONS = RungOptions(
    "mysql local binaries",
    [MYSQL_BIN_DIR, MYSQL_USER, MYSQL_MAX_CONNECTIONS, MYSQL_START_TIMEOUT],
)
CONTAINER_OPTIONS = RungOptions(
    "mysql container", [MYSQL_IMAGE, MYSQL_NETWORK, MYSQL_MAX_CONNECTIONS, MYSQL_START_TIMEOUT]
)
