"""The storage half imports no part of the kit (usable without it); the plugin half is
what the entry point names; capabilities are declared honestly."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

from rdq_redis.plugin import RedisBackend, backend
from rdq_redis.storage import CLOCK_DESCRIPTION, RedisStorage

STORAGE_HALF = [
    "rdq_redis", "rdq_redis.storage", "rdq_redis.admin", "rdq_redis.keys",
    "rdq_redis.scripts", "rdq_redis.codec", "rdq_redis.connection", "rdq_redis.errors",
    "rdq_redis.persistence",
]  # fmt: skip


def test_the_storage_half_imports_without_the_kit():
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'rdq_compliance':\n"
        "            raise ImportError('the kit is not installed: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        f"for m in {STORAGE_HALF!r}: __import__(m)\n"
        "assert not [m for m in sys.modules if m.startswith('rdq_compliance')]\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_the_entry_point_is_the_plugin_half():
    (ep,) = [e for e in entry_points(group="rdq.backends") if e.name == "redis"]
    assert ep.value == "rdq_redis.plugin:backend"
    assert ep.load() is backend and isinstance(backend, RedisBackend)


def test_capabilities_are_honest():
    caps = RedisStorage("redis://127.0.0.1:1/0", "ns").capabilities()
    assert caps.multi_process is True
    assert caps.max_payload_bytes is None  # the server's limit (512 MB) is above the kit's
    assert caps.notify is False
    assert caps.clock == CLOCK_DESCRIPTION and "redis TIME" in caps.clock
    # durability is read from the server; one that does not answer promises nothing
    assert caps.durable is False
    assert caps.durability.startswith("unknown: the settings could not be read (")
