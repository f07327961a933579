"""Bad input to the mongo backend is a clear ``InvalidArgument`` naming what was wrong and
what to do, before anything is sent or started (shown on a closed port: any network call
would be ``BackendUnavailable``): malformed URIs, options pymongo would only warn about
and ignore, rdq's own ``rdq_*`` URI options, client options rdq_mongo sets itself,
database names MongoDB refuses (or keeps for itself), and bad ``--rdq-option mongo_*``."""

from __future__ import annotations

import pytest
from rdq_mongo.connection import parse_uri
from rdq_mongo.plugin import backend
from rdq_mongo.server import MongoServer
from rdq_mongo.storage import MongoStorage

from rdq_compliance.provision.backend import ProvisionRequest, ProvisionUnavailable
from rdq_core.errors import InvalidArgument
from tests._ports import closed_port

NOWHERE = f"mongodb://127.0.0.1:{closed_port()}/?directConnection=true"

#: URI -> what the message must say
BAD_URIS = {
    "localhost:27017": r"expected mongodb://host:port",
    "postgresql://h/db": r"expected mongodb://host:port",
    "mongodb://h:notaport/": r"Port contains non-digit characters",
    "mongodb://h:99999/": r"Port must be an integer between 0 and 65535",
    "mongodb://u:p@@h/": r"must be escaped according to RFC 3986",
    "mongodb://h/?tls=maybe": r"tls must be 'true' or 'false'",
    "mongodb://h/?bogusOption=1": r"Unknown option",
    "mongodb://h/?serverSelectionTimeoutMS=-1": r"serverselectiontimeoutms must be greater",
    "mongodb://h/?authMechanism=NOPE": r"authmechanism must be in",
    "mongodb+srv://h.example.net:27017/": r"must not include a port number",
    "mongodb://h/?rdq_claim_write=nonsense": (
        r"rdq_claim_write='nonsense': expected one of auto, find_and_modify, update_then_read"
    ),
    "mongodb://h/?rdq_claim=auto": r"unknown rdq option 'rdq_claim'.*only one is rdq_claim_write",
    "mongodb://h/?w=1": r"w='1': rdq_mongo sets it itself \(w=majority.*remove it from the URI",
    "mongodb://h/?retryWrites=false": r"retryWrites='false': rdq_mongo sets it itself",
    "mongodb://h/?readPreference=secondary": r"readPreference='secondary': rdq_mongo sets it",
    "mongodb://h/?readConcernLevel=local": r"readConcernLevel='local': rdq_mongo sets it",
    "mongodb://h/?journal=false": r"journal='false': rdq_mongo sets it itself",
}


@pytest.mark.parametrize("uri", list(BAD_URIS))
def test_bad_uris_are_refused_before_anything_is_sent(uri):
    pattern = BAD_URIS[uri]
    with pytest.raises(InvalidArgument, match=pattern):
        MongoStorage(uri, "ns1")
    with pytest.raises(InvalidArgument, match=pattern):
        MongoServer(uri)  # the plugin half reads the URI the same way (rung 1)
    with pytest.raises(InvalidArgument, match=pattern):
        backend.server_from_dsn(uri, ProvisionRequest(workdir="/nonexistent"))


def test_options_rdq_sets_may_be_repeated_with_its_own_values():
    uri = "mongodb://h/?w=majority&retryWrites=true&readPreference=primary&journal=true"
    assert parse_uri(uri).uri.startswith("mongodb://h/?w=majority")
    assert parse_uri("mongodb://h/?rdq_claim_write=find_and_modify").claim_write == (
        "find_and_modify"
    )
    assert "rdq_" not in parse_uri("mongodb://h/?rdq_claim_write=auto&appName=x").uri


def test_passwords_are_masked_in_uri_errors():
    with pytest.raises(InvalidArgument) as info:
        MongoStorage("mongodb://user:s3cret@h/?tls=maybe", "ns1")
    assert "s3cret" not in str(info.value) and "user:***@h" in str(info.value)


@pytest.mark.parametrize(
    "name",
    ["", "a.b", "a b", "a/b", "a$b", 'a"b', "a\x00b", "x" * 64, "admin", "local", "config",
     "Admin", "CONFIG", None, 7],
)  # fmt: skip
def test_database_names_mongodb_refuses_or_keeps_are_refused(name):
    with pytest.raises(InvalidArgument, match=r"invalid mongo namespace"):
        MongoStorage(NOWHERE, name)  # type: ignore[arg-type]


def test_a_server_refuses_to_drop_a_reserved_database(mongo_server):
    for name in ("admin", "local", "Config"):
        with pytest.raises(InvalidArgument, match=r"is one of MongoDB's own databases"):
            mongo_server.drop_namespace(name)
    assert "local" in mongo_server.admin.connection().list_database_names()  # never dropped


def test_a_63_character_name_is_fine():
    MongoStorage(NOWHERE, "x" * 63)


@pytest.mark.parametrize(
    ("options", "pattern"),
    [
        ({"mongo_server": "postgres"}, r"mongo_server='postgres': expected one of auto"),
        ({"mongo_start_timeout": "-1"}, r"mongo_start_timeout='-1': expected a positive number"),
        ({"mongo_start_timeout": "soon"}, r"mongo_start_timeout='soon': expected a positive"),
        ({"mongo_sync_on_commit": "maybe"}, r"mongo_sync_on_commit='maybe': expected true or"),
        ({"mongo_sever": "mongod"}, r"unknown --rdq-option mongo_sever: the mongo options are"),
    ],
)
def test_bad_rung_options_are_refused_before_anything_starts(tmp_path, options, pattern):
    request = ProvisionRequest(workdir=tmp_path, options=options)
    with pytest.raises(InvalidArgument, match=pattern):
        backend.start_local_server(request)
    assert not (tmp_path / "mongo-data").exists() and not (tmp_path / "mongo.log").exists()
    if set(options) & {"mongo_start_timeout", "mongo_sever"}:  # read by the container rung
        with pytest.raises(InvalidArgument, match=pattern):
            backend.start_container(request)  # before Docker is even asked


def test_a_bin_dir_without_a_server_names_the_folder_and_the_remedies(tmp_path):
    empty = tmp_path / "nothing-here"
    request = ProvisionRequest(workdir=tmp_path, options={"mongo_bin_dir": str(empty)})
    with pytest.raises(ProvisionUnavailable, match=r"nothing-here.*pip install SecantusDB"):
        backend.start_local_server(request)
