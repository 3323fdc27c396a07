"""A wire-protocol endpoint that answers only the handshake, as a server of a chosen kind would.

No ``mongod`` can run here, and the embedded server is a replica set of a recent release; this
stands in for a standalone ``mongod`` or an old one, for the one thing under test: what a process
does with the server's ``hello`` reply before it sends anything else. Every other command gets
``{ok: 1}`` (a ping) or an error; nothing is stored.
"""

from __future__ import annotations

import socketserver
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import bson

OP_REPLY, OP_QUERY, OP_MSG = 1, 2004, 2013
HANDSHAKES = {"hello", "ismaster", "isMaster"}


def _command_of(op_code: int, body: bytes) -> dict[str, Any]:
    if op_code == OP_QUERY:  # flags, full collection name, skip, limit, then the query document
        name_end = body.index(b"\0", 4)
        return dict(bson.decode(body[name_end + 9:][: struct.unpack_from("<i", body, name_end + 9)[0]]))
    # OP_MSG: flag bits, then a kind-0 section holding the command document
    size = struct.unpack_from("<i", body, 5)[0]
    return dict(bson.decode(body[5:5 + size]))


class _Handler(socketserver.BaseRequestHandler):
    server: _HelloServer

    def handle(self) -> None:
        while True:
            header = self._read(16)
            if header is None:
                return
            length, request_id, _, op_code = struct.unpack("<iiii", header)
            body = self._read(length - 16)
            if body is None:
                return
            command = _command_of(op_code, body)
            first = next(iter(command), "")
            reply = self.server.hello() if first in HANDSHAKES else (
                {"ok": 1.0} if first in ("ping", "endSessions") else
                {"ok": 0.0, "errmsg": f"{first} is not served here", "code": 59})
            self._send(op_code, request_id, reply)

    def _read(self, n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            chunk = self.request.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def _send(self, op_code: int, request_id: int, reply: dict[str, Any]) -> None:
        doc = bson.encode(reply)
        if op_code == OP_QUERY:
            payload = struct.pack("<iqii", 0, 0, 0, 1) + doc
            kind = OP_REPLY
        else:
            payload = struct.pack("<IB", 0, 0) + doc
            kind = OP_MSG
        self.request.sendall(struct.pack("<iiii", 16 + len(payload), 0, request_id, kind) + payload)


class _HelloServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, fields: dict[str, Any]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fields = fields

    def hello(self) -> dict[str, Any]:
        me = "{}:{}".format(*self.server_address)
        # A set member lists itself, or a driver finds no primary in the set it names.
        member = {"hosts": [me], "me": me, "primary": me, "setVersion": 1} if "setName" in self.fields else {}
        return {**member, "helloOk": True, "ismaster": True, "isWritablePrimary": True, "minWireVersion": 0,
                "maxBsonObjectSize": 16 * 1024 * 1024, "maxMessageSizeBytes": 48_000_000,
                "maxWriteBatchSize": 100_000, "localTime": datetime.now(UTC), "connectionId": 1,
                **self.fields, "ok": 1.0}


@contextmanager
def answering_hello(**fields: Any) -> Iterator[str]:
    """A URI of an endpoint whose ``hello`` carries ``fields`` (e.g. ``maxWireVersion=21`` and no
    ``setName``: a standalone MongoDB 7.0), for the block."""
    server = _HelloServer(fields)
    thread = threading.Thread(target=server.serve_forever, name="hello-server", daemon=True)
    thread.start()
    try:
        yield f"mongodb://127.0.0.1:{server.server_address[1]}/recruiter_check"
    finally:
        server.shutdown()
        server.server_close()
