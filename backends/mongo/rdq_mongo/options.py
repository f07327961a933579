"""The ``--rdq-option`` settings of the mongo rungs, declared once (plugin half).

Both kit-owned rungs parse them with the kit's shared parser
(:mod:`rdq_compliance.provision.options`), so a bad value fails the same way whichever
rung reads it, before anything is started.

==========================  =============================================================
``mongo_server``            which local server (:data:`LOCAL_SERVERS`): ``auto`` (the
                            default: ``mongod`` if found, else ``secantusd-py``),
                            ``mongod``, ``secantus`` — local rung
``mongo_bin_dir``           folders (``os.pathsep``-separated) holding ``mongod`` or
                            ``secantusd-py``, searched *instead of* ``PATH``, the usual
                            folders and this Python's scripts folder — local rung
``mongo_sync_on_commit``    start SecantusDB with ``--sync-on-commit`` (fsync its log on
                            every commit; not needed against a process kill) (false) —
                            local rung
``mongo_start_timeout``     seconds to wait for the server to be a writable primary (60)
                            — both rungs
``mongo_image``             the container image (:data:`DEFAULT_IMAGE`; where no registry
                            answers, ``rdq-local/secantusdb`` from
                            tools/build_local_images.sh: SecantusDB, not MongoDB) —
                            container rung
``mongo_network``           the container's network mode: ``auto``, ``host``,
                            ``published`` (:mod:`rdq_compliance.provision.kit_container`)
                            — container rung
==========================  =============================================================
"""

from __future__ import annotations

from collections.abc import Mapping

from rdq_compliance.provision.options import OptionValues, Paths, RungOptions, option
from rdq_core.errors import InvalidArgument

__all__ = [
    "CONTAINER_OPTIONS",
    "DEFAULT_IMAGE",
    "LOCAL_OPTIONS",
    "LOCAL_SERVERS",
    "MONGO_BIN_DIR",
    "MONGO_IMAGE",
    "MONGO_NETWORK",
    "MONGO_SERVER",
    "MONGO_START_TIMEOUT",
    "MONGO_SYNC_ON_COMMIT",
    "check_known",
    "local_server",
]

#: The container rung's default: the official image, MongoDB 7 (a supported release
#: of the 6.0+ the backend needs, and the one its CI templates name).
DEFAULT_IMAGE = "mongo:7"
LOCAL_SERVERS = ("auto", "mongod", "secantus")

MONGO_SERVER = option(
    "mongo_server",
    str,
    "auto",
    "which local server: auto (mongod if found, else secantusd-py), mongod, secantus",
)
MONGO_BIN_DIR = option(
    "mongo_bin_dir",
    Paths,
    None,
    "folders holding mongod or secantusd-py, searched instead of PATH and the usual folders",
)
MONGO_SYNC_ON_COMMIT = option(
    "mongo_sync_on_commit", bool, False, "start SecantusDB with --sync-on-commit"
)
MONGO_START_TIMEOUT = option(
    "mongo_start_timeout",
    float,
    60.0,
    "seconds to wait for the server to be a writable primary",
    positive=True,
)
MONGO_IMAGE = option("mongo_image", str, DEFAULT_IMAGE, "the container image")
MONGO_NETWORK = option(
    "mongo_network", str, "auto", "the container's network mode: auto, host or published"
)

#: Rung 2, :mod:`rdq_mongo.local`.
LOCAL_OPTIONS = RungOptions(
    "mongo local binaries",
    [MONGO_SERVER, MONGO_BIN_DIR, MONGO_SYNC_ON_COMMIT, MONGO_START_TIMEOUT],
)
#: Rung 3, :mod:`rdq_mongo.container`.
CONTAINER_OPTIONS = RungOptions(
    "mongo container", [MONGO_IMAGE, MONGO_NETWORK, MONGO_START_TIMEOUT]
)


def local_server(values: OptionValues) -> str:
    """``mongo_server`` checked against :data:`LOCAL_SERVERS`."""
    kind = values[MONGO_SERVER].strip().lower()
    if kind not in LOCAL_SERVERS:
        raise InvalidArgument(
            f"--rdq-option mongo_server={values[MONGO_SERVER]!r}: expected one of "
            f"{', '.join(LOCAL_SERVERS)} ({MONGO_SERVER.help}; default "
            f"{MONGO_SERVER.show_default()})"
        )
    return kind


def check_known(options: Mapping[str, object]) -> None:
    """Refuse a ``mongo_*`` key no mongo rung declares (a typo would be silently ignored:
    the kit ignores keys a rung does not declare, since the rungs share one set)."""
    known = {o.name for o in (*LOCAL_OPTIONS, *CONTAINER_OPTIONS)}
    unknown = sorted(k for k in options if k.startswith("mongo_") and k not in known)
    if unknown:
        raise InvalidArgument(
            f"unknown --rdq-option {', '.join(unknown)}: the mongo options are "
            f"{', '.join(sorted(known))}"
        )
