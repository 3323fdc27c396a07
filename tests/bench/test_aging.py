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


def test_a_run_ages_each_server_once_and_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    aged: list[str] = []
    monkeypatch.setattr(aging, "age", lambda server: aged.append(server.uri) or 1.0)
    said: list[str] = []
    one, two = Server("mongodb://h:1", "one", None), Server("mongodb://h:2", "two", None)
    ager = aging.Aging(True, said.append)
    assert ager.ready(one) is one
    ager.ready(one)
    ager.ready(two)
    assert aged == ["mongodb://h:1", "mongodb://h:2"]
    assert len(said) == 2
    assert said[0].startswith(f"bench: aged the server with {aging.AGED_WRITES} retryable writes")

    off = aging.Aging(False, said.append)
    assert off.ready(one) is one
    assert aged == ["mongodb://h:1", "mongodb://h:2"]
