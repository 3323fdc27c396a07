"""The server the benchmark runs against: ``RECRUITER_TEST_MONGODB_URI``, or an embedded one.

The embedded SecantusDB is started the way the test suite starts it: a separate
``secantusd-py`` process on a free port with a throwaway storage directory,
stopped when the benchmark ends.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from recruiter.processes import embedded
from recruiter.store.connection import ConnectionProblem, with_database

URI_ENVVAR = "RECRUITER_TEST_MONGODB_URI"


@dataclass(frozen=True)
class Server:
    uri: str  # no database in it
    description: str
    pid: int | None  # of the embedded server, to report its memory

    def database_uri(self, database: str) -> str:
        """``uri`` with ``database`` in its path (options kept)."""
        return with_database(self.uri, database)


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
    with tempfile.TemporaryDirectory(prefix="recruiter-bench-") as storage, ExitStack() as stack:
        port = embedded.free_port()
        try:
            proc = stack.enter_context(embedded.serving(
                port, Path(storage) / "data", log_path=Path(storage) / "server.log", timeout_s=timeout_s,
                stop_wait_s=15))
        except ConnectionProblem as exc:
            raise SystemExit(f"bench: {exc}, or set {URI_ENVVAR}") from None
        uri = f"mongodb://127.0.0.1:{port}/"
        yield Server(uri, f"SecantusDB {_version(uri)} (embedded, WiredTiger storage)", proc.pid)
