"""``RdqError.rule``: an SPI error may name the kit rule it shows broken (kept across
pickling, as worker processes send errors back); ordinary errors name none."""

from __future__ import annotations

import pickle

from rdq_core.errors import BackendUnavailable, NotFound, RdqError, StaleClaim


def test_errors_name_no_rule_by_default() -> None:
    assert StaleClaim("stale").rule is None
    assert NotFound("gone").rule is None


def test_a_rule_is_carried_and_survives_pickling() -> None:
    exc = BackendUnavailable("script touched an undeclared key", rule="cluster-keys")
    assert exc.rule == "cluster-keys" and str(exc) == "script touched an undeclared key"
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is BackendUnavailable
    assert back.rule == "cluster-keys" and back.args == exc.args
    plain = pickle.loads(pickle.dumps(RdqError("x")))
    assert plain.rule is None and plain.args == ("x",)
