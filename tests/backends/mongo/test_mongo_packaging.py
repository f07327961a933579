"""The storage half imports no part of the kit (usable without it); the plugin half is
what the ``mongo`` entry point names; a storage opens nothing until its first call; the
capabilities are declared honestly."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

from rdq_mongo.plugin import MongoBackend, backend
from rdq_mongo.storage import CLOCK_DESCRIPTION, MAX_PAYLOAD_BYTES, MongoStorage

STORAGE_HALF = [
    "rdq_mongo", "rdq_mongo.storage", "rdq_mongo.connection", "rdq_mongo.documents",
    "rdq_mongo.updates", "rdq_mongo.schema", "rdq_mongo.flavour", "rdq_mongo.errors",
    "rdq_mongo.window",
]  # fmt: skip
PLUGIN_HALF = ["rdq_mongo.plugin", "rdq_mongo.server", "rdq_mongo.local", "rdq_mongo.container"]


def _blocking_kit(body: str) -> subprocess.CompletedProcess:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'rdq_compliance':\n"
        "            raise ImportError('the kit is not installed: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n" + body
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_the_storage_half_imports_and_opens_without_the_kit():
    proc = _blocking_kit(
        f"for m in {STORAGE_HALF!r}: __import__(m)\n"
        "from rdq_mongo.storage import MongoStorage\n"
        "uri = 'mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=100'\n"
        "MongoStorage(uri, 'ns1').capabilities()\n"
        "assert not [m for m in sys.modules if m.startswith('rdq_compliance')]\n"
    )
    assert proc.returncode == 0, proc.stderr


def test_the_plugin_half_needs_the_kit():
    """The check above can fail: the plugin half does import the kit."""
    proc = _blocking_kit(f"__import__({PLUGIN_HALF[0]!r})\n")
    assert proc.returncode != 0 and "the kit is not installed" in proc.stderr


def test_the_entry_point_is_the_plugin_half():
    (ep,) = [e for e in entry_points(group="rdq.backends") if e.name == "mongo"]
    assert ep.value == "rdq_mongo.plugin:backend"
    assert ep.load() is backend and isinstance(backend, MongoBackend)
    assert backend.name == "mongo"


def test_capabilities_are_honest_without_a_server():
    caps = MongoStorage("mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=100", "ns").capabilities()
    assert caps.multi_process is True and caps.notify is False
    assert caps.max_payload_bytes == MAX_PAYLOAD_BYTES < 16 * 1024 * 1024
    assert caps.clock == CLOCK_DESCRIPTION and "$$NOW" in caps.clock
    # durability is the server's; one that does not answer promises nothing
    assert caps.durable is False
    assert caps.durability.startswith("unknown: the server could not be asked (")
