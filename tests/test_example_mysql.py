"""``examples/rdq-mysql``: what its kit runs do not show — that it is built from the kit's
public surface only, and that bad input (a DSN of another scheme, wrong credentials) is
one clear error, never a PyMySQL stack trace. (That its storage half needs no kit, its
entry point, a closed port, a server killed mid-use and its local rung's faults are the
server contract's, ``tests/server_contract/``, which runs the example as one of the
server backends, through its public names.) The whole kit on it (conformance, stateful,
chaos; DSN and local rungs) runs in ``.ci/run``, from a fresh venv, with
``examples/rdq-mysql/run-kit.sh``.

Imports the example from its source folder, which pytest puts on ``sys.path``
(``pythonpath`` in ``[tool.pytest.ini_options]``: the example is not installed in the dev
venv, so its ``mysql`` entry point never joins the kit's own runs; PyMySQL, its driver, is
in the kit's ``dev`` extra) and, for the server checks, needs the MariaDB at
``RDQ_MYSQL_DSN`` (default ``mysql://root@127.0.0.1:3306/test``);
without them these tests skip — except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from rdq_core.errors import BackendUnavailable, InvalidArgument
from tests._ci import missing
from tests._waiting import HANG_S

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "rdq-mysql"
DSN = os.environ.get("RDQ_MYSQL_DSN", "mysql://root@127.0.0.1:3306/test")


def _need(condition: bool, reason: str) -> None:
    if not condition:
        missing(reason)


def _rdq_mysql():
    try:
        import rdq_mysql.server
        import rdq_mysql.storage
    except ImportError:
        _need(False, "rdq_mysql cannot be imported: is PyMySQL there? pip install -e '.[dev]'")
    return rdq_mysql


# ---- the public surface -------------------------------------------------------------

PUBLIC_PROVISION = "rdq_compliance.provision"
#: The core modules the README's "Use the kit for your own backend" names for a storage
#: (``rdq_core.masking``: the one secret masker every backend's messages use).
PUBLIC_CORE = {
    "rdq_core",
    "rdq_core.spi",
    "rdq_core.model",
    "rdq_core.errors",
    "rdq_core.cursor",
    "rdq_core.tokens",
    "rdq_core.masking",
}


def private_uses(source: str) -> list[str]:
    """Imports of the kit that a stranger's backend should not need: any
    ``rdq_compliance`` module other than ``rdq_compliance.provision`` itself, a core
    module the README does not name, and any ``_``-prefixed name from the kit or the core."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            module = node.module
            kit = module.split(".")[0] in ("rdq_compliance", "rdq_core")
            if module.startswith("rdq_compliance") and module != PUBLIC_PROVISION:
                found.append(f"line {node.lineno}: from {module} import ...")
            if module.split(".")[0] == "rdq_core" and module not in PUBLIC_CORE:
                found.append(f"line {node.lineno}: from {module} import ...")
            for alias in node.names:
                if kit and alias.name.startswith("_"):
                    found.append(f"line {node.lineno}: private name {module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("rdq_compliance") and alias.name != PUBLIC_PROVISION:
                    found.append(f"line {node.lineno}: import {alias.name}")
    return found


def test_the_surface_check_catches_a_reach_into_the_kit():
    broken = (
        "from rdq_compliance.provision.process import ManagedProcess\n"
        "from rdq_compliance.provision import _watchdog\n"
        "import rdq_compliance.session\n"
        "from rdq_core.validation import task_id\n"
    )
    assert private_uses(broken) == [
        "line 1: from rdq_compliance.provision.process import ...",
        "line 2: private name rdq_compliance.provision._watchdog",
        "line 3: import rdq_compliance.session",
        "line 4: from rdq_core.validation import ...",
    ]
    assert private_uses("from rdq_compliance.provision import ManagedProcess\n") == []


def test_the_example_uses_only_the_public_surface():
    sources = sorted((EXAMPLE / "rdq_mysql").glob("*.py"))
    assert sources, f"no sources under {EXAMPLE}"
    found = {p.name: private_uses(p.read_text()) for p in sources}
    assert not any(found.values()), f"the example reaches past the public surface: {found}"


def test_the_tests_folder_holds_only_configuration():
    files = sorted(p.name for p in (EXAMPLE / "tests").iterdir() if p.name != "__pycache__")
    assert files == ["conftest.py"]
    tree = ast.parse((EXAMPLE / "tests" / "conftest.py").read_text())
    assert len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr), "conftest.py has code"


# ---- bad input --------------------------------------------------------------------------


def _clean(exc: BaseException) -> str:
    """The message, after checking no driver exception is chained for a traceback."""
    assert exc.__cause__ is None and (exc.__context__ is None or exc.__suppress_context__), (
        f"{type(exc).__name__} carries a chained driver exception: {exc.__context__!r}"
    )
    return str(exc)


@pytest.mark.parametrize(
    ("dsn", "expected"),
    [
        ("postgresql://root@127.0.0.1:3306/test", "has scheme 'postgresql'"),
        ("mysql://127.0.0.1:3306/test", "names no user"),
        ("mysql://root@:3306/test", "names no host"),
        ("mysql://root@127.0.0.1:notaport/test", "does not parse"),
        ("mysql://root@127.0.0.1/test?sslmode=on", "unknown parameter 'sslmode'"),
        ("mysql://root@127.0.0.1/test?connect_timeout=soon", "is not a positive number"),
    ],
)
def test_a_malformed_dsn_is_refused_before_any_connection(dsn, expected):
    rdq_mysql = _rdq_mysql()
    with pytest.raises(InvalidArgument) as caught:
        rdq_mysql.server.MySqlServer(dsn)
    text = _clean(caught.value)
    assert expected in text, text
    assert "mysql DSN 'mysql://" in text or "has scheme" in text, text


def test_a_password_is_never_shown():
    rdq_mysql = _rdq_mysql()
    with pytest.raises(InvalidArgument) as caught:
        rdq_mysql.server.MySqlServer("postgres://root:s3cret@127.0.0.1/test")
    assert "s3cret" not in str(caught.value) and "root:***@" in str(caught.value)


def _server_answers() -> bool:
    rdq_mysql = _rdq_mysql()
    try:
        rdq_mysql.server.MySqlServer(DSN).close()
    except BackendUnavailable:
        return False
    return True


def test_wrong_credentials_say_so():
    _need(_server_answers(), f"no MariaDB answers at {DSN}")
    rdq_mysql = _rdq_mysql()
    address = rdq_mysql.dsn.parse_dsn(DSN)
    bad = f"mysql://{address.user}:wrong-password@{address.host}:{address.port}/test"
    with pytest.raises(BackendUnavailable) as caught:
        rdq_mysql.server.MySqlServer(bad)
    text = _clean(caught.value)
    assert "refused the credentials" in text and "check the user and password" in text
    assert "wrong-password" not in text


def test_a_storage_on_a_missing_namespace_says_how_to_create_it():
    _need(_server_answers(), f"no MariaDB answers at {DSN}")
    rdq_mysql = _rdq_mysql()
    storage = rdq_mysql.storage.MySqlStorage(DSN, "rdq_no_such_namespace")
    with pytest.raises(BackendUnavailable) as caught:
        storage.stats("q")
    text = _clean(caught.value)
    assert "'rdq_no_such_namespace' does not exist" in text
    assert "Server.create_namespace()" in text


def test_the_server_is_named_for_what_it_is():
    _need(_server_answers(), f"no MariaDB answers at {DSN}")
    rdq_mysql = _rdq_mysql()
    server = rdq_mysql.server.MySqlServer(DSN)
    try:
        assert server.flavour in ("MariaDB", "MySQL")
        assert server.version == f"{server.flavour} {server.server_version}"
        assert server.server_version.split("-")[0] in server.version
    finally:
        server.close()


@pytest.mark.parametrize(
    ("flush", "doublewrite", "durable"),
    [("1", "1", True), ("2", "ON", True), ("3", "1", True), ("0", "1", False), ("1", "0", False)],
)
def test_durability_follows_the_server_settings(flush, doublewrite, durable):
    rdq_mysql = _rdq_mysql()
    got, why = rdq_mysql.storage.durability_of(flush, doublewrite)
    assert got is durable
    assert f"innodb_flush_log_at_trx_commit={flush}" in why


def test_the_local_server_keeps_its_temporary_tables_to_itself(tmp_path):
    """A MariaDB/MySQL server deletes every ``#sql*`` file of its tmpdir when it starts:
    one the kit starts must not use the shared ``/tmp``, or it pulls the temporary tables
    from under the machine's own server (seen in CI: "Error on delete of
    '/tmp/#sql-temptable-...'" on the server at 3306 while a local rung started)."""
    import tempfile

    import pymysql

    from rdq_compliance.provision import ProvisionRequest, ProvisionUnavailable

    _rdq_mysql()
    from rdq_mysql.plugin import backend

    try:
        server = backend.start_local_server(ProvisionRequest(workdir=tmp_path))
    except ProvisionUnavailable as exc:
        _need(False, f"no local mariadbd/mysqld: {exc}")
    try:
        port = int(server.dsn.rsplit(":", 1)[1].split("/")[0])
        conn = pymysql.connect(host="127.0.0.1", port=port, user="root", connect_timeout=HANG_S)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT @@tmpdir")
                (tmpdir,) = cur.fetchone()
        finally:
            conn.close()
    finally:
        server.close()
    assert Path(tmpdir).resolve() != Path(tempfile.gettempdir()).resolve(), tmpdir
    assert Path(tmpdir).name == "tmp" and "rdq-mysql" in tmpdir, tmpdir
