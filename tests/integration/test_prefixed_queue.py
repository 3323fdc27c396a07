"""The collection prefix on the real server (issue 41, "its own names"): a producer, the admin API,
the CLI and the leader's doorbell of one prefix use only their own collections, beside another
queue and an application's collections in the same database; ``recruiter status`` warns, in one
line on stderr, when the database holds collections that are not recruiter's."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from click.testing import CliRunner

from recruiter import AsyncRecruiter, Recruiter
from recruiter.cli.main import main
from recruiter.store import async_client, parse_target
from recruiter.store.names import async_database
from recruiter.store.wakeup import Doorbell
from tests.workables import Record

OURS = {"scheduled", "archived", "roster", "heartbeats", "metadata", "unique_keys", "schedules", "timeline"}


def status(db_uri: str, *extra: str) -> Any:
    return CliRunner().invoke(main, ["status", "--json", "--target", db_uri, *extra], catch_exceptions=False)


def test_a_prefixed_queue_uses_only_its_own_collections_beside_another(db_uri: str, db: Any) -> None:
    with Recruiter.connect(db_uri, prefix="q_") as rec, Recruiter.connect(db_uri) as plain:
        created = set(db.list_collection_names())
        indexed = OURS - {"metadata"}  # the collections whose indexes a producer makes
        assert indexed <= created
        assert {f"q_{n}" for n in indexed} <= created
        validated = db.command("listCollections", filter={"name": "q_scheduled"})["cursor"]["firstBatch"]
        assert "validator" in validated[0]["options"], "the validator is set on the prefixed scheduled"
        mine = rec.enqueue(Record(db_uri, n=1).as_job_of(rec).in_group("g"))
        theirs = plain.enqueue(Record(db_uri, n=2).as_job_of(plain).in_group("g"))
        assert [d["_id"] for d in db.q_scheduled.find()] == [mine.id]
        assert [d["_id"] for d in db.scheduled.find()] == [theirs.id]
        assert sum(rec.admin.status().scheduled.values()) == 1
        assert rec.admin.job(theirs.id) is None
        assert plain.admin.job(mine.id) is None
        assert rec.cancel(mine.id).state == "cancelled", "a transaction on the prefixed collections"
        assert db.q_archived.count_documents({"_id": mine.id}) == 1
        assert db.archived.count_documents({}) == 0
        assert db.scheduled.count_documents({"_id": theirs.id}) == 1
        rec.schedule("tick", every="1h", job=Record(db_uri, n=3).as_job_of(rec))
        assert db.q_schedules.count_documents({}) == 1
        assert db.schedules.count_documents({}) == 0


def test_the_cli_reads_the_queue_of_its_prefix(db_uri: str, db: Any) -> None:
    with Recruiter.connect(db_uri, prefix="q_") as rec:
        job = rec.enqueue(Record(db_uri, n=1).as_job_of(rec).in_group("g"))
    seen = CliRunner().invoke(main, ["jobs", "show", str(job.id), "--target", db_uri, "--collection-prefix", "q_"])
    assert seen.exit_code == 0, seen.output
    unseen = CliRunner().invoke(main, ["jobs", "show", str(job.id), "--target", db_uri])
    assert unseen.exit_code != 0
    assert "no job" in unseen.output.lower()
    figures = json.loads(status(db_uri, "--collection-prefix", "q_").stdout)
    assert figures["scheduled"] == {"queued": 1}
    assert json.loads(status(db_uri).stdout)["scheduled"] == {}


def test_status_warns_in_one_line_when_the_database_is_shared(db_uri: str, db: Any) -> None:
    with Recruiter.connect(db_uri):
        pass
    alone = status(db_uri)
    assert alone.exit_code == 0
    assert alone.stderr == "", "recruiter's own collections alone: no warning"
    db.users.insert_one({"_id": 1})
    db.orders.insert_one({"_id": 1})
    shared = status(db_uri)
    assert shared.exit_code == 0, shared.output
    json.loads(shared.stdout)  # the figures stay parseable: the warning is on stderr
    lines = shared.stderr.splitlines()
    assert len(lines) == 1, shared.stderr
    assert lines[0].startswith("warning: this database holds 2 collection(s) that are not recruiter's (orders, users;")
    assert "its own database" in lines[0]
    assert "--collection-prefix" in lines[0]
    # A prefixed queue in the same database: the unprefixed queue and the application are not its own.
    prefixed = status(db_uri, "--collection-prefix", "q_")
    # The unprefixed queue's 8 collections (dependency_edges among them) and the application's 2.
    assert "(archived, dependency_edges, heartbeats and 7 more; prefix 'q_')" in prefixed.stderr


def test_the_doorbell_of_a_prefix_rings_for_its_own_collections_only(db_uri: str, db: Any) -> None:
    async def scenario() -> None:
        target = parse_target(db_uri)
        client = async_client(target)
        adb = async_database(client, target.database, "q_")
        bell = Doorbell(adb, max_await_s=0.2)
        try:
            await bell.open()
            assert bell.take_arrivals() == ([], True)
            await client[target.database].scheduled.insert_one({"_id": "other-queue", "locked": False})
            await client[target.database].users.insert_one({"_id": "app"})
            await adb.scheduled.insert_one({"_id": "ours", "locked": False})
            assert await bell.wait(5)
            while await bell.wait(0.3):
                pass
            assert bell.drain() == {"scheduled"}, "the event's collection by recruiter's name"
            assert bell.take_arrivals() == ([{"_id": "ours", "locked": False}], False)
            await adb.metadata.insert_one({"_id": "paused", "groups": []})
            assert await bell.wait(5)
            assert bell.take("metadata")
        finally:
            await bell.close()
            await client.close()

    asyncio.run(scenario())


def test_an_async_producer_and_its_admin_use_the_prefix(db_uri: str, db: Any) -> None:
    async def scenario() -> None:
        rec = await AsyncRecruiter.connect(db_uri, prefix="q_")
        try:
            job = await rec.enqueue(Record(db_uri, n=1).as_job_of(rec))
            assert (await rec.admin.job(job.id)) is not None
        finally:
            await rec.close()
        assert db.q_scheduled.count_documents({}) == 1
        assert "scheduled" not in db.list_collection_names()

    asyncio.run(scenario())
