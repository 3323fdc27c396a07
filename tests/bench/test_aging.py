"""``bin/bench --aged-server``: the retryable writes a server holds after it has run a while."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import MongoClient

from bench import aging
from bench.commands import Commands
from bench.server import Server


def test_aging_sends_retryable_writes_and_leaves_no_database(server_uri: str) -> None:
    seen = Commands()
    server = Server(server_uri, "the test server", None)
    client: MongoClient[Any] = MongoClient(server_uri)
    try:
        before = set(client.list_database_names())
        assert aging.age(server, writes=40, event_listeners=[seen]) > 0
        assert set(client.list_database_names()) - before == set()
    finally:
        client.close()
    updates = [cmd for name, _, cmd in seen.events if name == "update"]
    assert len(updates) == 40
    assert all(len(cmd["updates"]) == 1 and not cmd["updates"][0].get("multi") for cmd in updates)
    if "txnNumber" not in updates[0]:
        pytest.skip("this server takes no retryable writes (a standalone mongod)")
    assert all("txnNumber" in cmd for cmd in updates)  # each one a reply the server keeps
