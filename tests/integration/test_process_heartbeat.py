"""Heartbeats per worker process, not per lane (issue 26): one document written per process
per interval, however many slots and look-ahead lanes the process has.

A worker process with ``--concurrency 4 --prefetch 1`` has 8 roster entries. Its heartbeat
thread's client is watched with a command listener: every beat is one update command of one
statement, all on the same document, about one per interval; and that one document makes
all 8 entries live (``recruiter workers list``) until the process stops.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from pymongo import AsyncMongoClient, MongoClient

from bench.commands import Commands
from recruiter.admin.workers import workers
from recruiter.domain.clock import SystemClock
from recruiter.processes.worker.runtime import WorkerConfig, WorkerProcess
from recruiter.store import strict
from recruiter.store.indexes import ensure_indexes
from tests.integration.test_processes_inproc import eventually

INTERVAL_S = 0.2
BEATS = 10


def test_a_process_of_eight_lanes_writes_one_heartbeat_document_per_interval(db_uri: str, db: Any) -> None:
    async def main() -> None:
        seen = Commands()
        client: AsyncMongoClient[Any] = AsyncMongoClient(db_uri, tz_aware=True, event_listeners=strict.listeners())
        beating: MongoClient[Any] = MongoClient(db_uri, tz_aware=True, event_listeners=[seen, *strict.listeners()])
        adb = client.get_default_database()
        await ensure_indexes(adb)
        config = WorkerConfig(worker_id="many", concurrency=4, prefetch=1, heartbeat_interval_s=INTERVAL_S,
                              deregister_wait_s=0.5)
        process = WorkerProcess(adb, SystemClock(), config, heartbeat_db=beating.get_default_database())
        running = asyncio.create_task(process.run())
        try:
            await eventually(lambda: _named(adb, 8), message="the 8 lanes named by the process's heartbeat")
            assert await adb.roster.count_documents({}) == 8
            assert await adb.heartbeats.count_documents({}) == 1  # one document, not 8

            seen.clear()
            started = time.monotonic()
            await eventually(lambda: _beats(seen, BEATS), message=f"{BEATS} beats")
            # Beats before the time: the thread beats on, and a beat counted later is not in the elapsed time.
            updates = seen.named("update", "heartbeats")
            elapsed = time.monotonic() - started
            statements = [u for cmd in updates for u in cmd["updates"]]
            # One update command per beat, one statement in it, all on the process's document.
            assert len(statements) == len(updates), [len(c["updates"]) for c in updates]
            assert {repr(u["q"]["_id"]) for u in statements} == {repr(process.heartbeats.key)}
            assert all(not u.get("upsert") for u in statements)  # a beat never creates the document
            # About one an interval (the first may come early: the clock started between beats).
            assert len(updates) <= elapsed / INTERVAL_S + 2, (len(updates), elapsed)
            assert seen.named("insert", "heartbeats") == []
            assert seen.named("delete", "heartbeats") == []

            doc = await adb.heartbeats.find_one({})
            assert doc is not None
            assert doc["_id"] == process.heartbeats.key
            assert sorted(doc["ids"]) == sorted(s.id for s in process.slots)
            assert {s["id"] for s in doc["slots"].values()} == {s.id for s in process.slots}
            # The one document makes all 8 entries live, each with its own session.
            views = await asyncio.to_thread(workers, db, datetime.now(UTC))
            assert len(views) == 8
            assert all(v.live for v in views), views
        finally:
            process.stop()
            await asyncio.wait_for(running, timeout=30)
            beating.close()
            await client.close()
        # Stopped, every lane gone from the roster: its heartbeat document goes too.
        assert db.roster.count_documents({}) == 0
        assert db.heartbeats.count_documents({}) == 0

    asyncio.run(main())


async def _named(adb: Any, n: int) -> bool:
    doc = await adb.heartbeats.find_one({})
    return doc is not None and len(doc.get("ids") or []) == n


async def _beats(seen: Commands, n: int) -> bool:
    return len(seen.named("update", "heartbeats")) >= n


def test_a_round_reads_only_the_slots_it_needs_of_a_process_document(db_uri: str, db: Any) -> None:
    """A round that needs the beat of one entry of a process of 100 slots reads that slot of the
    process's document, not all 100; a document that is also stale comes back whole (every slot
    of it is judged); an entry whose slot is gone from its process's document gets no beat, and
    the document is not taken for malformed."""
    from bson import ObjectId

    from recruiter.domain.liveness import process_document, slot_document, slot_key
    from recruiter.store.heartbeats import read_round_beats

    now = datetime.now(UTC)
    fresh_key, stale_key = ObjectId(), ObjectId()

    def doc(key: ObjectId, prefix: str, at: datetime) -> dict[str, Any]:
        ids = [f"{prefix}-{i}" for i in range(100)]
        return {"_id": key, **process_document(str(key), at, 5.0, 1, "h", f"w:{key}"), "ids": ids,
                "slots": {slot_key(i): slot_document(i, ObjectId()) for i in ids}}

    db.heartbeats.insert_many([doc(fresh_key, "f", now), doc(stale_key, "s", now - timedelta(minutes=5))])
    entries = [{"_id": "f-7", "process": str(fresh_key)}, {"_id": "s-3", "process": str(stale_key)},
               {"_id": "f-gone", "process": str(fresh_key)}]

    async def read(stale: bool) -> tuple[list[dict[str, Any]], list[object]]:
        client: AsyncMongoClient[Any] = AsyncMongoClient(db_uri, tz_aware=True)
        try:
            return await read_round_beats(client.get_default_database().heartbeats, entries, now, stale=stale)
        finally:
            await client.close()

    beats, malformed = asyncio.run(read(stale=False))
    assert sorted(b["_id"] for b in beats) == ["f-7", "s-3"]  # one slot of each document, none for f-gone
    assert malformed == []
    beats, malformed = asyncio.run(read(stale=True))
    ids = sorted(b["_id"] for b in beats)
    assert ids == sorted(["f-7", *(f"s-{i}" for i in range(100))]), ids[:5]  # the stale one whole, once
    assert malformed == []
