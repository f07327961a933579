"""The lookup of a plugin by name that the backend registry and the deployed systems share
(:mod:`rdq_compliance.entry_points`)."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from rdq_compliance import registry
from rdq_compliance.entry_points import load_named


class Missing(LookupError):
    pass


def _found(**eps: str) -> dict[str, EntryPoint]:
    return {n: EntryPoint(name=n, value=v, group="rdq.test") for n, v in eps.items()}


def test_a_name_loads_its_object_and_says_where_it_came_from() -> None:
    obj, origin = load_named(
        "e", group="rdq.test", kind="thing", found=_found(e="math:e"), error=Missing
    )
    assert obj == pytest.approx(2.718281828)
    assert origin == "entry point math:e"


def test_an_unknown_name_lists_what_is_installed_and_how_to_add_one() -> None:
    with pytest.raises(Missing) as info:
        found = _found(b="m:b", a="m:a")
        load_named("x", group="rdq.test", kind="thing", found=found, error=Missing)
    assert str(info.value) == (
        "no rdq thing named 'x'; installed things: a, b. Install the thing's package "
        "(it registers itself under the 'rdq.test' entry point)."
    )
    with pytest.raises(Missing, match="installed things: none"):
        load_named("x", group="rdq.test", kind="thing", found={}, error=Missing)


def test_an_entry_point_that_cannot_be_imported_says_so_with_the_hint() -> None:
    with pytest.raises(Missing) as info:
        load_named(
            "gone",
            group="rdq.test",
            kind="thing",
            found=_found(gone="rdq_no_such_module_anywhere:X"),
            error=Missing,
            import_hint="pip install it",
        )
    text = str(info.value)
    assert text.startswith("thing 'gone' is registered but cannot be imported (")
    assert "rdq_no_such_module_anywhere" in text and text.endswith("; pip install it")
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_a_backend_whose_driver_is_missing_names_the_extra(monkeypatch) -> None:
    monkeypatch.setattr(registry, "installed", lambda: _found(pg="rdq_no_such_driver_here:B"))
    with pytest.raises(registry.UnknownBackend, match=r"pip install 'rdq\[pg\]'"):
        registry.load_backend("pg")
    with pytest.raises(registry.UnknownBackend, match=r"or pass module\.path:attribute\."):
        registry.load_backend("nope")
