"""rdq_core.masking.mask_dsn: every DSN form the built-in backends' drivers read."""

from __future__ import annotations

import pytest

from rdq_core.masking import is_secret_key, mask_dsn

PW = "Zq7-distinctive-s3cret"


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        (f"postgresql://u:{PW}@h:5432/db", "postgresql://u:***@h:5432/db"),
        (
            f"postgresql://u@h/db?password={PW}&sslmode=require",
            "postgresql://u@h/db?password=***&sslmode=require",
        ),
        (f"redis://:{PW}@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        (f"redis://127.0.0.1:6379/0?password={PW}", "redis://127.0.0.1:6379/0?password=***"),
        (f"mysql://root:{PW}@127.0.0.1:3306/test", "mysql://root:***@127.0.0.1:3306/test"),
        (f"mysql://root@h/test?passwd={PW}", "mysql://root@h/test?passwd=***"),
        (
            f"mongodb://u:{PW}@h1:1,h2:2/?authMechanismProperties=AWS_SESSION_TOKEN:{PW}",
            "mongodb://u:***@h1:1,h2:2/?authMechanismProperties=***",
        ),
        (
            f"mongodb://h/?tlsCertificateKeyFilePassword={PW}",
            "mongodb://h/?tlsCertificateKeyFilePassword=***",
        ),
        (
            f"postgresql://h/db?sslpassword={PW}&sslkey=/k/{PW}.key",
            "postgresql://h/db?sslpassword=***&sslkey=***",
        ),
        (
            f"host=h port=5432 password={PW} dbname=test",
            "host=h port=5432 password=*** dbname=test",
        ),
        (f"host=h password='{PW} with space' user=u", "host=h password=*** user=u"),
        (f"host=h PASSWORD = {PW}", "host=h PASSWORD=***"),
        (f"host=h password='{PW}", None),
        (f"postgresql://u:{PW}@[::1/db", None),
        ("/tmp/rdq/sqlite-dir", "/tmp/rdq/sqlite-dir"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("mongodb://u@h/?authMechanism=MONGODB-X509", "mongodb://u@h/?authMechanism=MONGODB-X509"),
    ],
)
def test_every_secret_is_masked_and_nothing_else_changes(dsn: str, shown: str | None) -> None:
    if shown is None:  # masked whole
        shown = f"<unparsable DSN, {len(dsn)} characters>"
    assert mask_dsn(dsn) == shown
    assert PW not in mask_dsn(dsn)


@pytest.mark.parametrize(
    "key", ["password", "PassWord", "pwd", "db_token", "client_secret", "sslkey"]
)
def test_secret_keys(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["host", "sslmode", "user", "authMechanism", "dbname"])
def test_keys_that_are_not_secrets(key: str) -> None:
    assert not is_secret_key(key)
