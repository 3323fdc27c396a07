"""A round woken by enqueues alone answers from what the leader knows (recruiter.processes.known_jobs):
it reads nothing and hands out what a reading round would; any other change to the queue, to the
switches, or a known job that was not as known, makes the next round read."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta

from recruiter.admin import Admin
from recruiter.store.wakeup import Doorbell
from tests.integration.test_processes_inproc import Harness, run
from tests.workables import Record

READS = ("find", "aggregate", "count", "getMore")


def _reads(h: Harness) -> list[tuple[str, str]]:
    return [(name, coll) for name in READS for coll in ("scheduled", "roster", "metadata", "heartbeats")
            for _ in h.commands.named(name, coll)]


async def _hear(h: Harness, bell: Doorbell, *, every: bool = False) -> None:
    """Wait for the doorbell (with ``every``, until it has nothing more), then hand the leader
    what it heard, as its leader loop does before a round."""
    assert await bell.wait(5)
    while every and await bell.wait(0.3):
        pass
    h.recruiter.planner.woken(bell.drain(), *bell.take_arrivals())


async def _heard_all(bell: Doorbell) -> None:
    """Consume every event so far (registrations, the test's own writes): what rang before the
    last round is what that round read."""
    while await bell.wait(0.3):
        pass
    bell.drain()
    bell.take_arrivals()


@contextlib.asynccontextmanager
async def _bell(h: Harness) -> AsyncIterator[Doorbell]:
    """A doorbell on the harness's database, open, closed after the test."""
    bell = Doorbell(h.db, max_await_s=0.2)
    try:
        await bell.open()
        bell.take_arrivals()  # the stream just opened: the rounds after it read, and know from then on
        yield bell
    finally:
        await bell.close()


def test_a_round_woken_by_an_enqueue_alone_reads_nothing_and_hands_the_job_to_the_same_worker(
        db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        async with _bell(h) as bell:
            for i in range(3):
                await h.worker(f"w{i}", "g")
                h.clock.advance(timedelta(milliseconds=10))  # w0 has waited longest
            await _heard_all(bell)
            assert (await h.round()).assigned == 0  # reads group g whole: no job
            job = await Record(h.db_uri, n=1).as_job_of(h.producer).in_group("g").enqueue()
            await _hear(h, bell)
            assert h.recruiter.planner.insert_woken
            h.commands.clear()
            report = await h.round()
            assert _reads(h) == []
            assert report.assigned == 1
            assert (await h.roster("w0"))["assigned_to"] == {"w0": job}  # longest free first, as a reading round
            assert h.recruiter.reader.known.answered > 0
            # The next job, also told by the doorbell, goes to the next worker without a read either.
            second = await Record(h.db_uri, n=2).as_job_of(h.producer).in_group("g").enqueue()
            await _hear(h, bell)
            h.commands.clear()
            assert (await h.round()).assigned == 1
            assert _reads(h) == []
            assert (await h.roster("w1"))["assigned_to"] == {"w1": second}

    run(db_uri, scenario)


def test_a_job_unlocked_behind_the_leader_makes_the_next_round_read_and_find_it(db_uri: str) -> None:
    """An unlock is not an enqueue: a round that answered from memory would miss the job."""
    async def scenario(h: Harness) -> None:
        async with _bell(h) as bell:
            for i in range(2):
                await h.worker(f"w{i}", "g")
            held = await Record(h.db_uri, n=1).as_job_of(h.producer).in_group("g").enqueue()
            await h.db.scheduled.update_one({"_id": held}, {"$set": {"locked": True}})  # as if running elsewhere
            await _heard_all(bell)
            await h.round()
            await h.db.scheduled.update_one({"_id": held}, {"$set": {"locked": False}})  # e.g. a mongosh edit
            new = await Record(h.db_uri, n=2).as_job_of(h.producer).in_group("g").enqueue()
            await _hear(h, bell, every=True)  # the unlock's event, then the enqueue's
            assert not h.recruiter.planner.insert_woken
            report = await h.round()
            assert report.assigned == 2
            assigned = {(await h.roster(w))["assigned_to"][w] for w in ("w0", "w1")}
            assert assigned == {held, new}

    run(db_uri, scenario)


def test_a_pause_heard_with_an_enqueue_is_obeyed_by_the_next_round(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        async with _bell(h) as bell:
            await h.worker("w", "g")
            await _heard_all(bell)
            await h.round()
            await _pause(h, "g")
            await Record(h.db_uri, n=1).as_job_of(h.producer).in_group("g").enqueue()
            await _hear(h, bell, every=True)
            assert not h.recruiter.planner.insert_woken  # the switches rang too
            assert (await h.round()).assigned == 0
            assert h.commands.named("find", "metadata")

    run(db_uri, scenario)


async def _pause(h: Harness, group: str) -> None:
    """``recruiter pause group`` (the operator's switch, through the admin API)."""
    await asyncio.to_thread(Admin(h.sync_db).pause, "group", [group], force=True)


def test_a_known_job_gone_since_is_found_by_its_lock_and_the_next_round_reads_at_once(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        async with _bell(h) as bell:
            await h.worker("w", "g")
            await _heard_all(bell)
            await h.round()
            gone = await Record(h.db_uri, n=1).as_job_of(h.producer).in_group("g").enqueue()
            h.clock.advance(timedelta(milliseconds=5))
            await _hear(h, bell)
            await h.db.scheduled.delete_one({"_id": gone})  # deletes raise no event: still known
            job = await Record(h.db_uri, n=2).as_job_of(h.producer).in_group("g").enqueue()
            assert await bell.wait(5)
            arrivals, disturbed = bell.take_arrivals()
            h.recruiter.planner.woken(bell.drain(), arrivals, disturbed)
            assert h.recruiter.planner.insert_woken
            missed = await h.round()  # the older, gone job is chosen from memory: its lock misses
            assert missed.assigned == 0
            assert h.recruiter.planner.known_missed
            assert h.recruiter.reader.known.groups == {}
            h.recruiter.planner.woken(set(), [], False, caught_up=7)  # the next round, run at once (busy)
            again = await h.round()
            assert again.assigned == 1
            assert (await h.roster("w"))["assigned_to"] == {"w": job}
            # The events of jobs handled while busy are read one wait at a time: until the doorbell
            # has caught up with its stream, an enqueue's event wakes a reading round, not a quiet one.
            later = await h.db.scheduled.find_one({"_id": job})
            h.recruiter.planner.woken({"scheduled"}, [{**later, "_id": "stale"}], False, caught_up=7)
            assert not h.recruiter.planner.insert_woken
            h.recruiter.planner.woken({"scheduled"}, [{**later, "_id": "new"}], False, caught_up=8)
            assert h.recruiter.planner.insert_woken

    run(db_uri, scenario)


def test_a_deferred_outcome_makes_the_next_round_read_the_roster(db_uri: str) -> None:
    """A round that read outcomes and left one for later (a lone outcome of a busy slot) is not
    followed by a round that reads no roster: it would hand work to the entry holding it."""
    async def scenario(h: Harness) -> None:
        await h.worker("w", "g")
        await h.round()
        h.recruiter.planner.outcomes_settled = False  # as after a round that deferred an outcome
        await Record(h.db_uri, n=1).as_job_of(h.producer).in_group("g").enqueue()
        doc = await h.db.scheduled.find_one({})
        h.recruiter.planner.woken({"scheduled"}, [doc], False)
        h.commands.clear()
        assert (await h.round()).assigned == 1
        assert h.commands.named("find", "roster")

    run(db_uri, scenario)
