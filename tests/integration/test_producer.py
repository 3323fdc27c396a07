"""Enqueueing against the real server: sync and asyncio producers, indexes, refusals."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import ObjectId
from pymongo import AsyncMongoClient, MongoClient

from bench.commands import Commands
from recruiter import AsyncRecruiter, JobRefused, Recruiter
from recruiter.domain.clock import ManualClock
from recruiter.domain.retry import ExponentialBackoff, policy_from_document
from recruiter.domain.workable import workable_from_document
from recruiter.store import strict
from recruiter.store.connection import ConnectionProblem
from recruiter.store.indexes import INDEXES, ensure_indexes_sync
from tests.workables import BrokenConstructor, Record

START = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)


def test_connect_enqueue_and_read_back(db_uri: str, db: Any) -> None:
    with Recruiter.connect(db_uri) as rec:
        before = datetime.now(UTC)
        job_id = rec.enqueue(Record(db_uri, n=7).as_job_of(rec).in_group("billing").tagged("x"))
        after = datetime.now(UTC)
    assert isinstance(job_id, ObjectId)

    doc = db.scheduled.find_one({"_id": job_id})
    assert doc is not None
    assert doc["group"] == "billing"
    assert doc["tags"] == ["x"]
    assert doc["status"] == "queued"
    assert doc["locked"] is False
    assert doc["attempts"] == 0
    assert doc["workable"] == {
        "class": "tests.workables:Record",
        "parameters": {"ledger_uri": db_uri, "n": 7},
        "method": "execute",
    }
    # Dates are BSON dates on the server's time line (the server runs on this machine).
    assert db.scheduled.count_documents({"_id": job_id, "created_at": {"$type": "date"},
                                         "scheduled_at": {"$type": "date"}}) == 1
    assert doc["created_at"].tzinfo is not None
    slack = timedelta(seconds=5)
    assert before - slack <= doc["created_at"] <= after + slack
    assert doc["scheduled_at"] == doc["created_at"]
    # What was stored rebuilds the workable.
    rebuilt = workable_from_document(doc["workable"])
    assert isinstance(rebuilt, Record)
    assert rebuilt.n == 7


def test_enqueue_shortcut_with_workable(db_uri: str, db: Any) -> None:
    with Recruiter.connect(db_uri) as rec:
        job_id = rec.enqueue(Record(db_uri, n=1))
    assert db.scheduled.find_one({"_id": job_id})["group"] == "generic"


def test_connect_creates_the_indexes(db_uri: str, db: Any) -> None:
    Recruiter.connect(db_uri).close()
    for collection, models in INDEXES.items():
        names = set(db[collection].index_information())
        expected = {m.document["name"] for m in models}
        assert expected <= names, f"{collection}: missing {expected - names}"
    # Creating them again is harmless.
    Recruiter.connect(db_uri).close()
    ensure_indexes_sync(db)


def test_connect_without_indexes(db_uri: str, db: Any) -> None:
    with Recruiter.connect(db_uri, create_indexes=False) as rec:
        rec.enqueue(Record(db_uri))
    assert set(db.scheduled.index_information()) == {"_id_"}


def test_enqueue_many_is_one_insert_in_order(db_uri: str, db: Any) -> None:
    commands = Commands()
    client: MongoClient[Any] = MongoClient(db_uri, tz_aware=True, event_listeners=[commands, *strict.listeners()])
    try:
        clock = ManualClock(START)
        rec = Recruiter(client, db.name, clock=clock)
        ids = rec.enqueue_many(
            [Record(db_uri, n=i).as_job_of(rec).in_group("g") if i % 2 else Record(db_uri, n=i)
             for i in range(25)]
        )
    finally:
        client.close()

    inserts = commands.named("insert", "scheduled")
    assert len(inserts) == 1
    assert len(inserts[0]["documents"]) == 25
    assert [d["_id"] for d in inserts[0]["documents"]] == ids
    assert len(set(ids)) == 25
    stored = {d["_id"]: d for d in db.scheduled.find()}
    assert [stored[i]["workable"]["parameters"]["n"] for i in ids] == list(range(25))
    assert [stored[i]["group"] for i in ids] == ["g" if i % 2 else "generic" for i in range(25)]
    assert all(stored[i]["created_at"] == START for i in ids)


def test_enqueue_many_of_nothing_writes_nothing(db_uri: str, db: Any) -> None:
    commands = Commands()
    client: MongoClient[Any] = MongoClient(db_uri, tz_aware=True, event_listeners=[commands, *strict.listeners()])
    try:
        assert Recruiter(client, db.name).enqueue_many([]) == []
    finally:
        client.close()
    assert commands.named("insert", "scheduled") == []


def test_scheduled_at_is_respected(db_uri: str, db: Any) -> None:
    clock = ManualClock(START)
    with Recruiter.connect(db_uri, clock=clock) as rec:
        later = Record(db_uri).as_job_of(rec).schedule_in(minutes=5).enqueue()
        fixed = Record(db_uri).as_job_of(rec).schedule_at(datetime(2026, 3, 1, 8, 30, tzinfo=UTC)).enqueue()
        now = rec.enqueue(Record(db_uri))
    assert db.scheduled.find_one({"_id": later})["scheduled_at"] == START + timedelta(minutes=5)
    assert db.scheduled.find_one({"_id": fixed})["scheduled_at"] == datetime(2026, 3, 1, 8, 30, tzinfo=UTC)
    assert db.scheduled.find_one({"_id": now})["scheduled_at"] == START
    # The server compares them as dates: only one is due at START.
    assert [d["_id"] for d in db.scheduled.find({"scheduled_at": {"$lte": START}})] == [now]


def test_retry_policy_and_options_are_stored(db_uri: str, db: Any) -> None:
    policy = ExponentialBackoff(times=5, initial=timedelta(seconds=30))
    with Recruiter.connect(db_uri) as rec:
        job_id = (Record(db_uri).as_job_of(rec).retry_with(policy).for_tenant("acme")
                  .with_priority("high").with_timeout(9).enqueue())
    doc = db.scheduled.find_one({"_id": job_id})
    assert policy_from_document(doc["retry_policy"]) == policy
    assert (doc["tenant"], doc["priority"], doc["timeout_s"]) == ("acme", "high", 9.0)


def test_unserialisable_parameters_are_refused_and_nothing_is_written(db_uri: str, db: Any) -> None:
    with Recruiter.connect(db_uri) as rec:
        with pytest.raises(JobRefused, match=r"cannot store the parameters of tests\.workables:Record"):
            rec.enqueue(Record({"not", "a", "uri"}))  # type: ignore[arg-type]
        with pytest.raises(JobRefused, match="cannot store the parameters"):
            rec.enqueue_many([Record(db_uri, n=1), Record(db_uri, n=object()), Record(db_uri, n=3)])  # type: ignore[arg-type]
        with pytest.raises(JobRefused, match="group"):
            rec.enqueue_many([Record(db_uri, n=1), Record(db_uri, n=2).as_job_of(rec).in_group("*")])
        with pytest.raises(JobRefused, match="expected a Workable"):
            rec.enqueue_many([Record(db_uri, n=1), "not a job"])  # type: ignore[list-item]
    assert db.scheduled.count_documents({}) == 0


def test_constructor_checks_run_at_enqueue(db_uri: str, db: Any) -> None:
    with Recruiter.connect(db_uri) as rec:
        with pytest.raises(RuntimeError, match="cannot build with -1"):
            rec.enqueue(BrokenConstructor(-1))
        rec.enqueue(BrokenConstructor(2))
    assert [d["workable"]["parameters"] for d in db.scheduled.find()] == [{"value": 2}]


def test_async_recruiter(db_uri: str, db: Any) -> None:
    async def scenario() -> tuple[ObjectId, list[ObjectId]]:
        rec = await AsyncRecruiter.connect(db_uri)
        async with rec:
            one = await Record(db_uri, n=100).as_job_of(rec).in_group("async").schedule_in(seconds=30).enqueue()
            many = await rec.enqueue_many([Record(db_uri, n=i) for i in range(5)])
            with pytest.raises(JobRefused):
                await rec.enqueue_many([Record(db_uri, n=1), Record(db_uri, n={1})])  # type: ignore[arg-type]
        return one, many

    one, many = asyncio.run(scenario())
    assert db.scheduled.count_documents({}) == 6
    doc = db.scheduled.find_one({"_id": one})
    assert doc["group"] == "async"
    assert doc["scheduled_at"] - doc["created_at"] == timedelta(seconds=30)
    assert [db.scheduled.find_one({"_id": i})["workable"]["parameters"]["n"] for i in many] == list(range(5))
    for collection, models in INDEXES.items():
        assert {m.document["name"] for m in models} <= set(db[collection].index_information())


def test_async_enqueue_many_is_one_insert(db_uri: str, db: Any) -> None:
    commands = Commands()

    async def scenario() -> list[ObjectId]:
        client: AsyncMongoClient[Any] = AsyncMongoClient(db_uri, tz_aware=True,
                                                         event_listeners=[commands, *strict.listeners()])
        try:
            rec = AsyncRecruiter(client, db.name, clock=ManualClock(START))
            return await rec.enqueue_many([Record(db_uri, n=i) for i in range(10)])
        finally:
            await client.close()

    ids = asyncio.run(scenario())
    inserts = commands.named("insert", "scheduled")
    assert len(inserts) == 1
    assert [d["_id"] for d in inserts[0]["documents"]] == ids
    assert db.scheduled.count_documents({"created_at": START}) == 10


@pytest.mark.parametrize("uri", ["http://localhost/x", "mongodb://host:notaport/x", "mongodb://"])
def test_bad_uri_is_one_readable_line(uri: str) -> None:
    with pytest.raises(ConnectionProblem) as caught:
        Recruiter.connect(uri)
    message = str(caught.value)
    assert message.startswith("invalid MongoDB URI")
    assert "\n" not in message


def test_unreachable_server_is_one_readable_line() -> None:
    started = time.monotonic()
    with pytest.raises(ConnectionProblem) as caught:
        Recruiter.connect("mongodb://127.0.0.1:1/x", server_selection_timeout_s=0.5)
    assert time.monotonic() - started < 10
    message = str(caught.value)
    assert message == (
        "cannot reach MongoDB at mongodb://127.0.0.1:1/x: no server answered (ServerSelectionTimeoutError)"
    )


def test_async_unreachable_and_bad_uri() -> None:
    async def scenario() -> tuple[str, str]:
        with pytest.raises(ConnectionProblem) as unreachable:
            await AsyncRecruiter.connect("mongodb://127.0.0.1:1/x", server_selection_timeout_s=0.5)
        with pytest.raises(ConnectionProblem) as bad:
            await AsyncRecruiter.connect("mongodb://host:notaport/x")
        return str(unreachable.value), str(bad.value)

    unreachable, bad = asyncio.run(scenario())
    assert unreachable.startswith("cannot reach MongoDB at mongodb://127.0.0.1:1/x")
    assert "\n" not in unreachable
    assert bad.startswith("invalid MongoDB URI")
    assert "\n" not in bad
