"""Every deliberately broken backend and variant of the kit's own tests.

Each is a real storage (or the reference store) with one piece done the way a real queue
once got it wrong, exposed as a backend object and named to the kit like any backend::

    pytest --rdq-backend=tests.broken.memory:check_then_act_claim
    rdq-chaos run chaos/standard.toml --backend tests.broken.sqlite:check_then_act_claim

One module per store: :mod:`~tests.broken.memory` (the reference store, for the
conformance suite and the stateful machine), :mod:`~tests.broken.sqlite` (multi-process,
for the chaos campaigns), :mod:`~tests.broken.postgres`, :mod:`~tests.broken.redis`,
:mod:`~tests.broken.mongo` (the real server backends). **One naming scheme**: a bug has
one name on every store — the backend attribute (``outcome_ignores_token``) and its
storage class (``OutcomeIgnoresToken``) — and the name says the bug; ``control`` is a
store's unbroken copy through the same plumbing. :mod:`tests.broken.catalogue` lists every
variant under the bug class it stands for (``contract.md#8-bug-classes``), the rule it
breaks and the layer of the kit that must catch it; the kit's proofs read their cases from it, and
``tests/test_broken_catalogue.py`` fails when a variant here is not in it (or it names one
that is not here). Processes a test spawns import these modules by the same dotted names:
they get the checkout root on ``PYTHONPATH`` (:func:`tests._paths.pythonpath`).
"""
