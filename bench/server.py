"""The server the benchmark runs against: ``RECRUITER_TEST_MONGODB_URI``, or an embedded one.

The embedded SecantusDB is started the way the test suite starts it: a separate
``secantusd-py`` process on a free port with a throwaway storage directory,
stopped when the benchmark ends.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from recruiter import embedded
from recruiter.connection import ConnectionProblem

URI_ENVVAR = "RECRUITER_TEST_MONGODB_URI"


@dataclass(frozen=True)
class Server:
    uri: str  # no database in it
    description: str
    pid: int | None  # of the embedded server, to report its memory

    def database_uri(self, database: str) -> str:
        """``uri`` with ``database`` in its path (options kept)."""
        head, sep, options = self.uri.partition("?")
        scheme, _, rest = head.partition("://")
        hosts = rest.split("/", 1)[0]
        return f"{scheme}://{hosts}/{database}{sep}{options}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(client: MongoClient[Any]) -> bool:
    try:
        client.admin.command("ping")
        return True
    except PyMongoError:
        return False


def _version(uri: str) -> str:
    client: MongoClient[Any] = MongoClient(uri, serverSelectionTimeoutMS=5000)
    try:
        info = client.server_info()
        return str(info.get("version", "?"))
    finally:
        client.close()


@contextmanager
def running_server(timeout_s: float = 60.0) -> Iterator[Server]:
    external = os.environ.get(URI_ENVVAR)
    if external:
        yield Server(external, f"MongoDB {_version(external)} at {external.split('@')[-1]}", None)
        return
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="recruiter-bench-") as storage:
        log_path = Path(storage) / "server.log"
        try:
            proc = embedded.start(port, Path(storage) / "data", log_path=log_path)
        except ConnectionProblem as exc:
            raise SystemExit(f"bench: {exc}, or set {URI_ENVVAR}") from None
        uri = f"mongodb://127.0.0.1:{port}/"
        client: MongoClient[Any] = MongoClient(uri, serverSelectionTimeoutMS=500)
        try:
            deadline = time.monotonic() + timeout_s
            while not _answers(client):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"bench: the embedded server did not start: {log_path.read_text()[-2000:]}")
                time.sleep(0.1)
            yield Server(uri, f"SecantusDB {_version(uri)} (embedded, WiredTiger storage)", proc.pid)
        finally:
            client.close()
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
