"""The recruiter's doorbell on the real server: it outlives its stream ended by the server, carries enqueued
jobs, reports other changes to jobs, and passes over the events of writes the last reading round saw."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

from recruiter.domain.control import PAUSED_ID
from recruiter.store.connection import async_client, parse_target
from recruiter.store.wakeup import Doorbell


@contextlib.asynccontextmanager
async def _doorbell(db_uri: str) -> AsyncIterator[tuple[Any, Doorbell]]:
    """The test's database, on a client of its own, and a doorbell on it, open; both closed after the test."""
    target = parse_target(db_uri)
    client = async_client(target)
    bell = Doorbell(client[target.database], max_await_s=0.2)
    try:
        await bell.open()
        yield client[target.database], bell
    finally:
        await bell.close()
        await client.close()


def test_a_doorbell_whose_stream_the_server_ends_opens_another(db_uri: str, db: Any) -> None:
    async def scenario() -> None:
        async with _doorbell(db_uri) as (adb, bell):
            await adb.scheduled.insert_one({"_id": "before"})
            assert await bell.wait(5)
            assert bell.take("scheduled")
            # Dropping the database invalidates a database's stream; the driver then answers
            # "no event" for ever. The bell must see that, not keep reading a dead stream.
            await adb.client.drop_database(adb.name)
            assert not await bell.wait(1)
            assert bell.stream is None
            await bell.open()
            await adb.scheduled.insert_one({"_id": "after"})
            assert await bell.wait(5)
            assert bell.take("scheduled")

    asyncio.run(scenario())


def test_the_doorbell_carries_enqueued_jobs_and_reports_any_other_change_to_a_job(db_uri: str, db: Any) -> None:
    """An insert's event brings the job; a lock (the leader's own write) raises none; an unlock, an
    edit, a replace and a change of the pause switches ring, the job changes as ``disturbed``."""
    async def scenario() -> None:
        async with _doorbell(db_uri) as (adb, bell):
            assert bell.take_arrivals() == ([], True), "a stream just opened may have missed changes"
            await adb.scheduled.insert_one({"_id": "j1", "locked": False, "group": "g"})
            assert await bell.wait(5)
            arrivals, disturbed = bell.take_arrivals()
            assert arrivals == [{"_id": "j1", "locked": False, "group": "g"}]
            assert not disturbed
            assert bell.drain() == {"scheduled"}
            # The leader's lock: an update pipeline setting locked, as scheduled.lock_statements writes it.
            await adb.scheduled.update_many({"_id": {"$in": ["j1"]}, "locked": False},
                                            [{"$set": {"locked": {"$literal": True}, "lock_token": {"$literal": 1}}}])
            assert not await bell.wait(0.5)
            assert bell.drain() == set()
            assert bell.take_arrivals() == ([], False)
            changes = [
                lambda: adb.scheduled.update_one({"_id": "j1"}, {"$set": {"locked": False}}),  # an unlock
                lambda: adb.scheduled.update_one({"_id": "j1"}, {"$set": {"scheduled_at": 1}}),  # an edit
                lambda: adb.scheduled.replace_one({"_id": "j1"}, {"locked": False, "group": "h"}),
            ]
            for change in changes:
                await change()
                assert await bell.wait(5)
                assert bell.take("scheduled")
                assert bell.take_arrivals() == ([], True)
            await adb.metadata.update_one({"_id": PAUSED_ID}, {"$set": {"groups": ["g"]}}, upsert=True)
            assert await bell.wait(5)
            assert bell.drain() == {"metadata"}
            await adb.metadata.update_one({"_id": "some other document"}, {"$set": {"x": 1}}, upsert=True)
            assert not await bell.wait(0.5)
            # A hand-written job whose _id is a document is no arrival: the next round reads (and quarantines it).
            await adb.scheduled.insert_one({"_id": {"odd": 1}, "locked": False, "group": "g"})
            assert await bell.wait(5)
            assert bell.take_arrivals() == ([], True)

    asyncio.run(scenario())


def test_events_of_writes_the_last_reading_round_saw_wake_nothing(db_uri: str, db: Any) -> None:
    """After a busy spell the stream still holds the events of every job it handled: those older
    than the leader's last reading round (``seen_until``) are passed over without waking it."""
    async def scenario() -> None:
        async with _doorbell(db_uri) as (adb, bell):
            await adb.scheduled.insert_many([{"_id": f"old{i}", "locked": False, "group": "g"} for i in range(50)])
            await adb.roster.insert_one({"_id": "w"})
            await asyncio.sleep(0.01)  # apart by more than the events' millisecond
            bell.seen_until = datetime.now(UTC)  # a reading round began here
            await asyncio.sleep(0.01)
            assert not await bell.wait(0.5)
            assert bell.drain() == set()
            await adb.scheduled.insert_one({"_id": "new", "locked": False, "group": "g"})
            assert await bell.wait(5)
            arrivals, _ = bell.take_arrivals()
            assert [a["_id"] for a in arrivals] == ["new"]
            assert bell.drain() == {"scheduled"}
            # The pause switches are not read by every round: their events always ring.
            bell.seen_until = datetime.now(UTC) + timedelta(hours=1)
            await adb.metadata.update_one({"_id": PAUSED_ID}, {"$set": {"groups": []}}, upsert=True)
            assert await bell.wait(5)
            assert bell.drain() == {"metadata"}

    asyncio.run(scenario())


def test_while_no_lane_is_free_an_enqueue_alone_does_not_ring_but_an_outcome_does(db_uri: str, db: Any) -> None:
    """The last round found no lane to fill: an enqueue alone wakes no round (it could give the job
    to no one) and the wait lasts at least the longest backoff; the job stays known for the next
    round. An outcome or a registration rings at once, as does any enqueue once a lane is free."""
    async def scenario() -> None:
        async with _doorbell(db_uri) as (adb, bell):
            bell.take_arrivals()
            loop = asyncio.get_running_loop()
            began = loop.time()
            waiting = asyncio.create_task(bell.wait_for_work(0.05, no_free_lane=True, longest_s=1.5))
            await asyncio.sleep(0.2)
            await adb.scheduled.insert_one({"_id": "j1", "locked": False, "group": "g"})
            assert not await waiting
            assert loop.time() - began >= 1.4, "the wait is the longest backoff, not the one asked"
            arrivals, disturbed = bell.take_arrivals()
            assert [a["_id"] for a in arrivals] == ["j1"]
            assert not disturbed
            bell.drain()

            await adb.roster.insert_one({"_id": "w", "available": True})
            assert await bell.wait_for_work(5, no_free_lane=True, longest_s=5), "a registration rings"
            assert bell.drain() == {"roster"}
            waiting = asyncio.create_task(bell.wait_for_work(0.05, no_free_lane=True, longest_s=5))
            await adb.roster.update_one({"_id": "w"}, {"$set": {"outcome": {"job": "j0"}}})
            assert await asyncio.wait_for(waiting, 4), "an outcome rings"
            assert bell.drain() == {"roster"}
            bell.take_arrivals()

            await adb.scheduled.insert_one({"_id": "j2", "locked": False, "group": "g"})
            assert await bell.wait_for_work(5, no_free_lane=False, longest_s=5), "a lane free: an enqueue rings"
            assert [a["_id"] for a in bell.take_arrivals()[0]] == ["j2"]

    asyncio.run(scenario())
