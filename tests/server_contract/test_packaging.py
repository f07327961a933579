"""How every server backend is packaged: the storage half imports no part of the kit and
works without it (a storage opens nothing until its first call), the plugin half does
need the kit, the ``rdq.backends`` entry point names the plugin half, and the
capabilities are declared honestly when no server answers."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.server_contract.driver import Packaging, ServerDriver, installed_entry_point
from tests.server_contract.drivers import each

#: Python that refuses to import the kit, then runs the body given.
BLOCK_KIT = (
    "import sys\n"
    "class Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] == 'rdq_compliance':\n"
    "            raise ImportError('the kit is not installed: ' + name)\n"
    "sys.meta_path.insert(0, Block())\n"
)


def packaging(driver: ServerDriver) -> Packaging:
    assert driver.packaging is not None
    return driver.packaging


def _without_the_kit(driver: ServerDriver, body: str) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([*driver.pythonpath, *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, "-c", BLOCK_KIT + body],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
    )


@each("packaging")
def test_the_storage_half_imports_and_opens_without_the_kit(driver: ServerDriver) -> None:
    facts = packaging(driver)
    cls = facts.storage_class
    proc = _without_the_kit(
        driver,
        f"for m in {list(facts.storage_modules)!r}: __import__(m)\n"
        f"from {cls.__module__} import {cls.__name__}\n"
        f"{cls.__name__}({facts.unreachable_dsn!r}, 'ns1').capabilities()\n"
        "kit = sorted(m for m in sys.modules if m.startswith('rdq_compliance'))\n"
        "assert not kit, kit\n"
        f"plugin = sorted(m for m in sys.modules if m in {list(facts.plugin_modules)!r})\n"
        "assert not plugin, plugin\n",
    )
    assert proc.returncode == 0, proc.stderr


@each("packaging")
def test_the_plugin_half_needs_the_kit(driver: ServerDriver) -> None:
    """The check above can fail: the plugin half does import the kit."""
    for module in packaging(driver).plugin_modules:
        proc = _without_the_kit(driver, f"__import__({module!r})\n")
        assert proc.returncode != 0 and "the kit is not installed" in proc.stderr, module


@each("packaging")
def test_the_entry_point_is_the_plugin_half(driver: ServerDriver) -> None:
    facts = packaging(driver)
    ep = facts.entry_point() if facts.entry_point else installed_entry_point(driver.name)
    assert (ep.group, ep.name, ep.value) == ("rdq.backends", driver.name, driver.backend_ref)
    backend = ep.load()
    assert backend is driver.backend and isinstance(backend, facts.backend_class)
    assert backend.name == driver.name


@each("packaging")
def test_capabilities_are_honest_without_a_server(driver: ServerDriver) -> None:
    facts = packaging(driver)
    storage = facts.storage_class(facts.unreachable_dsn, "ns")  # type: ignore[call-arg]
    try:
        caps = storage.capabilities()
    finally:
        storage.close()
    assert caps.multi_process is True and caps.notify is False
    assert caps.max_payload_bytes == facts.max_payload_bytes
    if facts.server_payload_limit is not None:
        assert caps.max_payload_bytes is not None
        assert caps.max_payload_bytes < facts.server_payload_limit
    assert caps.clock == facts.clock and facts.clock_marker in caps.clock
    # durability is the server's; one that does not answer promises nothing
    assert caps.durable is False
    assert caps.durability.startswith(facts.unknown_durability), caps.durability
