"""``Capabilities.lease_model``: the known models, ``fixed_lease`` required exactly where a
model fixes the lease, ``lease_for`` the lease a claim gets, and a misspelt model refused."""

from __future__ import annotations

from datetime import timedelta

import pytest

from rdq_core.model import LEASE_MODELS, Capabilities

ASKED = timedelta(seconds=37)
FIVE = timedelta(seconds=5)


def test_the_per_claim_model_is_the_default_and_gives_the_lease_asked():
    caps = Capabilities()
    assert caps.lease_model == "per_claim" and caps.fixed_lease is None
    assert caps.lease_for(ASKED) == ASKED


@pytest.mark.parametrize("model", ["reclaimer_threshold", "fixed"])
def test_a_model_of_the_librarys_own_gives_its_lease_whatever_is_asked(model):
    caps = Capabilities(lease_model=model, fixed_lease=FIVE)
    assert caps.lease_for(ASKED) == caps.lease_for(timedelta(milliseconds=1)) == FIVE


def test_the_models_are_the_three_documented():
    assert set(LEASE_MODELS) == {"per_claim", "reclaimer_threshold", "fixed"}


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"lease_model": "per-claim"}, r"'per-claim' is not a lease model; known: fixed"),
        ({"lease_model": "fixed"}, r"'fixed' needs fixed_lease, a positive timedelta \(got None\)"),
        (
            {"lease_model": "reclaimer_threshold", "fixed_lease": timedelta(0)},
            r"needs fixed_lease, a positive timedelta",
        ),
        ({"fixed_lease": FIVE}, r"fixed_lease is not for lease_model 'per_claim'"),
        ({"lease_model": "fixed", "fixed_lease": 5}, r"a positive timedelta \(got 5\)"),
    ],
)
def test_a_wrong_declaration_is_refused_saying_what_is_wrong(kwargs, says):
    with pytest.raises(ValueError, match=says):
        Capabilities(**kwargs)
