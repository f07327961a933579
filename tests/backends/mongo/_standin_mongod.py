"""A STAND-IN for ``mongod`` — NOT MongoDB: a test double that speaks just enough of the
MongoDB wire protocol (``hello``/``isMaster``, ``replSetInitiate``, ``ping``,
``buildInfo``, ``serverStatus``) to let the local rung's command line and readiness
check be exercised where no real ``mongod`` can be installed.

Run as ``mongod <args>`` (the test installs it under that name in a folder of its own).
It writes what it was asked to ``$RDQ_STANDIN_RECORD`` (one JSON line per event: its
argv, and each ``replSetInitiate`` config), and behaves like a fresh ``mongod
--replSet``: not a primary, and no ``setName``, until ``replSetInitiate`` arrives; then
a writable primary of that set. It stores nothing and exits on SIGTERM. Its
``buildInfo`` version is ``0.0.0-standin`` so no report can take it for MongoDB.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
import threading

import bson

OP_REPLY, OP_QUERY, OP_MSG = 1, 2004, 2013
STATE = {"initiated": None}


def record(event: dict) -> None:
    with open(os.environ["RDQ_STANDIN_RECORD"], "a") as fh:
        fh.write(json.dumps(event) + "\n")


def arg(name: str) -> str:
    return sys.argv[sys.argv.index(name) + 1]


def answer(cmd: dict) -> dict:
    name = next(iter(cmd)).lower()
    base = {"ok": 1.0}
    if name in ("hello", "ismaster"):
        me = f"127.0.0.1:{arg('--port')}"
        out = {
            **base, "helloOk": True, "maxWireVersion": 21, "minWireVersion": 0,
            "maxBsonObjectSize": 16 * 1024 * 1024, "maxMessageSizeBytes": 48_000_000,
            "maxWriteBatchSize": 100_000, "logicalSessionTimeoutMinutes": 30,
        }  # fmt: skip
        config = STATE["initiated"]
        if config is None:
            return {
                **out,
                "ismaster": False,
                "isWritablePrimary": False,
                "secondary": False,
                "isreplicaset": True,
                "info": "Does not have a valid replica set config",
            }
        return {
            **out,
            "ismaster": True,
            "isWritablePrimary": True,
            "secondary": False,
            "setName": config["_id"],
            "hosts": [me],
            "me": me,
            "primary": me,
        }
    if name == "replsetinitiate":
        STATE["initiated"] = cmd["replSetInitiate"]
        record({"replSetInitiate": cmd["replSetInitiate"]})
        return base
    if name == "buildinfo":
        return {**base, "version": "0.0.0-standin"}
    if name == "serverstatus":
        return {**base, "process": "mongod-standin"}
    if name in ("ping", "endsessions"):
        return base
    return {"ok": 0.0, "errmsg": f"stand-in mongod: {name} not implemented", "code": 59}


def serve(conn: socket.socket) -> None:
    def read(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = conn.recv(n - len(buf))
            if not chunk:
                raise ConnectionError
            buf += chunk
        return buf

    try:
        while True:
            length, request_id, _, opcode = struct.unpack("<iiii", read(16))
            body = read(length - 16)
            if opcode == OP_QUERY:
                end = body.index(b"\0", 4)
                cmd = bson.decode(
                    body[end + 9 :][: struct.unpack("<i", body[end + 9 : end + 13])[0]]
                )
                doc = bson.encode(answer(cmd))
                payload = struct.pack("<iqii", 0, 0, 0, 1) + doc
                conn.sendall(
                    struct.pack("<iiii", 16 + len(payload), 0, request_id, OP_REPLY) + payload
                )
            elif opcode == OP_MSG:
                size = struct.unpack("<i", body[5:9])[0]
                cmd = bson.decode(body[5 : 5 + size])
                payload = struct.pack("<IB", 0, 0) + bson.encode(answer(cmd))
                conn.sendall(
                    struct.pack("<iiii", 16 + len(payload), 0, request_id, OP_MSG) + payload
                )
    except (ConnectionError, OSError):
        conn.close()


def main() -> None:
    record({"argv": sys.argv[1:]})
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((arg("--bind_ip"), int(arg("--port"))))
    listener.listen(16)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
