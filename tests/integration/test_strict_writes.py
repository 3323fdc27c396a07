"""The write guard sees what the driver really sends: inserts, updates, upserts, bulk writes,
findAndModify and update pipelines, through a real client and server."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from pymongo import InsertOne, MongoClient, UpdateOne
from pymongo.errors import PyMongoError

from recruiter.store import strict
from recruiter.store.connection import parse_target, sync_client


@pytest.fixture
def guarded(db_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A guard of the test's own: its violations are expected, so they go to a file of their own."""
    monkeypatch.setenv(strict.FILE_ENVVAR, str(tmp_path / "expected.jsonl"))
    guard = strict.StrictWrites()
    client: MongoClient[Any] = MongoClient(db_uri, event_listeners=[guard])
    yield guard, client.get_default_database()
    client.close()


def _try(write: Any) -> None:
    """Send a write the embedded server may accept or refuse: the guard saw it either way."""
    with contextlib.suppress(PyMongoError):
        write()


def test_each_write_command_is_checked(guarded: Any) -> None:
    guard, db = guarded
    _try(lambda: db.c.insert_one({"_id": {"$b": 1}}))
    _try(lambda: db.c.update_one({"_id": 1}, {"$set": {"$hotel": 320.1}}))
    _try(lambda: db.c.update_one({"_id": 2}, {"$set": {"job": {"parameters": {"$where": 1}}}}, upsert=True))
    _try(lambda: db.c.bulk_write([InsertOne({"a": 1}), UpdateOne({"a": 1}, {"$push": {"tags": {"x.y": 1}}})]))
    _try(lambda: db.c.find_one_and_update({"_id": 3}, {"$setOnInsert": {"p": {"$x": 1}}}, upsert=True))
    _try(lambda: db.c.update_many({}, [{"$set": {"j": {"$literal": {"order": {"$where": 1}}}}}]))
    _try(lambda: db.c.replace_one({"_id": 4}, {"a": {"b.c": 1}}))
    found = guard.take()
    assert [line.split(":")[0] for line in found] == [
        "insert c #0._id",
        "update c #0.$set.$hotel",
        "update c #0.$set.job.parameters.$where",
        "update c #0.$push.tags.x.y",
        "findAndModify c.$setOnInsert.p.$x",
        "update c #0.0.$set.j.$literal.order.$where",
        "update c #0.a.b.c",
    ], found


def test_accepted_writes_leave_no_violation(guarded: Any) -> None:
    guard, db = guarded
    db.c.insert_one({"$price": 50.0, "quantity": 30, "location": {"$db": "novels", "a.b": 1}})
    db.c.update_one({"quantity": 30}, {"$set": {"sold": 2}, "$inc": {"n": 1}, "$unset": {"x": ""}})
    db.c.update_one({"quantity": 30}, [{"$set": {"copy": {"$literal": {"plain": [1, {"x": 2}]}}}}])
    db.c.find_one_and_update({"quantity": 30}, {"$pull": {"list": {"$in": [1, 2]}}})
    assert guard.take() == []


def test_the_store_clients_carry_the_guard_and_it_writes_the_file(db_uri: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """RECRUITER_STRICT_WRITES switches it on for every client the store builds; each violation
    goes to RECRUITER_STRICT_WRITES_FILE as one JSON line."""
    path = tmp_path / "violations.jsonl"
    monkeypatch.setenv(strict.STRICT_ENVVAR, "1")
    monkeypatch.setenv(strict.FILE_ENVVAR, str(path))
    client = sync_client(parse_target(db_uri))
    try:
        _try(lambda: client.get_default_database().c.update_one({}, {"$set": {"$top": 1}}, upsert=False))
    finally:
        client.close()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["rule"], r["where"]) for r in records] == [("top-level-dollar", "update c #0.$set.$top")]
    assert strict.process_guard().take()  # seen in this process too; taken so this test passes
    path.unlink()
    monkeypatch.setenv(strict.STRICT_ENVVAR, "mongodb")  # MongoDB's own refusals only
    client = sync_client(parse_target(db_uri))
    try:
        client.get_default_database().c.update_one({}, {"$set": {"nested": {"$x": 1}}}, upsert=True)
    finally:
        client.close()
    assert not path.exists()
    assert strict.process_guard().take() == []
