"""``tools/loopback_watch.py`` watches the command it runs, not the machine: of the kit
containers running on the machine, only those a process of the command's tree made."""

from __future__ import annotations

import importlib.util

from tests._paths import ROOT

_spec = importlib.util.spec_from_file_location(
    "loopback_watch", ROOT / "tools" / "loopback_watch.py"
)
assert _spec is not None and _spec.loader is not None
watch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(watch)


def test_only_the_containers_the_commands_tree_made_are_watched() -> None:
    running = [(4100, 77), (4200, 88), (4300, 78), (0, 77)]  # (PID 1, the kit process)
    assert watch.owned_containers(running, {77, 78}) == [4100, 4300]
    assert watch.owned_containers(running, {99}) == []
    assert watch.owned_containers(running, set()) == []
