"""Command monitoring: what the listener counts, and the stats file a process writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pymongo import DeleteOne, InsertOne, UpdateMany, UpdateOne

from recruiter.store import monitoring
from recruiter.store.connection import parse_target, sync_client
from recruiter.store.monitoring import STATS_ENVVAR, CommandStats
from tests.conftest import REPO


def test_listener_counts_round_trips_bytes_and_empty_reads(db_uri: str) -> None:
    stats = CommandStats()
    client = sync_client(parse_target(db_uri), event_listeners=[stats])
    try:
        coll = client.get_default_database()["things"]
        coll.insert_one({"_id": 1, "payload": "x" * 1000})
        assert coll.find_one({"_id": 1}) is not None
        assert coll.find_one({"_id": 2}) is None
        coll.update_one({"_id": 1}, {"$set": {"seen": True}})
    finally:
        client.close()
    snap = stats.snapshot()
    commands, targets = snap["commands"], snap["targets"]
    assert commands["find"]["count"] == 2
    assert commands["find"]["empty"] == 1
    assert commands["insert"]["count"] == 1
    assert commands["update"]["count"] == 1
    assert targets["insert:things"]["count"] == 1
    assert targets["find:things"]["count"] == 2
    # The inserted document travels in the command; the found one in the reply.
    assert commands["insert"]["request_bytes"] > 1000
    assert commands["find"]["reply_bytes"] > 1000
    assert all(t["failed"] == 0 for t in commands.values())
    # Server monitoring's hellos are not command events.
    assert "hello" not in commands
    assert "isMaster" not in commands


def test_process_writes_its_totals_when_asked_by_the_environment(db_uri: str, tmp_path: Path) -> None:
    path = tmp_path / "stats.json"
    script = (
        "from recruiter.store import monitoring\n"
        "from recruiter.store.connection import parse_target, sync_client\n"
        f"c = sync_client(parse_target({db_uri!r}), event_listeners=monitoring.listeners())\n"
        "c.get_default_database()['things'].insert_many([{'n': i} for i in range(3)])\n"
        "c.get_default_database()['things'].find_one({'n': 2})\n"
        "c.close()\n"
    )
    env = {**os.environ, STATS_ENVVAR: str(path), "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=60)
    snap: dict[str, Any] = json.loads(path.read_text())
    assert snap["commands"]["insert"]["count"] == 1  # insert_many is one round trip
    assert snap["commands"]["find"]["count"] == 1
    assert snap["targets"]["insert:things"]["request_bytes"] > 0


def test_no_listener_without_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STATS_ENVVAR, raising=False)
    assert monitoring.listeners() == []


def test_listener_counts_the_documents_writes_wrote(db_uri: str) -> None:
    stats = CommandStats()
    client = sync_client(parse_target(db_uri), event_listeners=[stats])
    try:
        coll = client.get_default_database()["things"]
        coll.insert_many([{"_id": i, "n": i} for i in range(5)])
        coll.update_many({"n": {"$lt": 3}}, {"$set": {"low": True}})  # 3 matched and modified, by one statement
        coll.update_one({"_id": 0}, {"$set": {"low": True}})  # matched, not modified
        coll.bulk_write([UpdateOne({"_id": 9}, {"$set": {"n": 9}}, upsert=True),
                         UpdateOne({"_id": 4}, {"$set": {"n": 40}})])
        coll.delete_many({"n": {"$gte": 9}})  # _id 9 and 4
        coll.find_one_and_update({"_id": 1}, {"$set": {"n": 10}})
        coll.find_one_and_delete({"_id": 2})
    finally:
        client.close()
    targets = stats.snapshot()["targets"]
    assert targets["insert:things"]["inserted"] == targets["insert:things"]["written"] == 5
    update = targets["update:things"]
    assert (update["matched"], update["modified"], update["upserted"]) == (5, 4, 1)
    assert update["written"] == 5
    assert update["written_by_many"] == 3  # the update_many's; the bulk's one-document updates are not
    assert targets["delete:things"]["deleted"] == targets["delete:things"]["written_by_many"] == 2
    assert targets["findAndModify:things"]["modified"] == 1
    assert targets["findAndModify:things"]["deleted"] == 1
    assert all(t["written"] == 0 for k, t in targets.items() if k.startswith("find:"))


def test_a_client_bulk_write_counts_each_operation_under_its_own_collection(db_uri: str) -> None:
    """One ``bulkWrite`` command across collections (a round's locks and assignment): its writes
    are counted under ``update:<collection>``, ``insert:...``, as if sent apart, once."""
    stats = CommandStats()
    client = sync_client(parse_target(db_uri), event_listeners=[stats])
    try:
        db = client.get_default_database()
        db["a"].insert_many([{"_id": i} for i in range(3)])
        stats.by_target.clear()
        stats.by_command.clear()
        client.bulk_write([UpdateMany({"_id": {"$lt": 2}}, {"$set": {"x": 1}}, namespace=f"{db.name}.a"),
                           InsertOne({"_id": 7}, namespace=f"{db.name}.b"),
                           UpdateOne({"_id": 2}, {"$set": {"x": 2}}, namespace=f"{db.name}.a"),
                           DeleteOne({"_id": 7}, namespace=f"{db.name}.b")], verbose_results=True)
    finally:
        client.close()
    snap = stats.snapshot()
    targets = snap["targets"]
    assert (targets["update:a"]["modified"], targets["update:a"]["written_by_many"]) == (3, 2)
    assert targets["insert:b"]["inserted"] == 1
    assert targets["delete:b"]["deleted"] == 1
    assert targets["bulkWrite"]["count"] == 1
    assert targets["bulkWrite"]["written"] == 0  # counted once, under the operations
    assert targets["bulkWrite"]["documents"] == 0  # per-operation results are not documents read
    assert snap["commands"]["bulkWrite"]["written"] == 5


def test_listener_counts_the_retryable_writes_sent(db_uri: str) -> None:
    """A retryable write (one statement per document, outside a transaction) carries a transaction
    number, and the server keeps its reply: the count the bench prints per job."""
    stats = CommandStats()
    client = sync_client(parse_target(db_uri), event_listeners=[stats])
    try:
        coll = client.get_default_database()["things"]
        coll.insert_many([{"_id": i} for i in range(3)])  # one command: one retryable write
        coll.update_one({"_id": 0}, {"$set": {"x": 1}})
        coll.update_many({"_id": 0}, {"$set": {"x": 2}})  # may touch many: not retryable
        coll.bulk_write([UpdateOne({"_id": 1}, {"$set": {"x": 1}}), UpdateMany({"_id": 2}, {"$set": {"x": 1}})])
        coll.find_one({"_id": 0})
        with client.start_session() as session, session.start_transaction():
            coll.update_one({"_id": 0}, {"$set": {"x": 3}}, session=session)  # in a transaction: not one
    finally:
        client.close()
    commands = stats.snapshot()["commands"]
    if commands["update"]["retryable"] == 0:
        pytest.skip("this server takes no retryable writes (a standalone mongod)")
    assert commands["insert"]["retryable"] == 1
    assert commands["update"]["retryable"] == 1  # the update_one; not the update_many, the mixed bulk, the txn's
    assert commands["update"]["count"] == 4
    assert commands["find"]["retryable"] == 0
