"""Never lost, never twice: fencing, liveness, shutdown, poison jobs, archiving, timeouts.

The process objects are driven step by step with a :class:`ManualClock` (see
``test_processes_inproc``); faults are injected at named points, and jobs that
must be "running" wait for a release entry in the ledger, so no test depends on
timing.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
from datetime import timedelta
from typing import Any

import pytest
from bson import ObjectId
from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError

from recruiter.domain.clock import ManualClock
from recruiter.domain.liveness import MAX_UNPROVEN_RETURNS
from recruiter.domain.retry import RetryManyTimes
from recruiter.processes.cleaner import CleanerConfig, CleanerProcess
from recruiter.processes.leadership import LostLease, no_fault
from recruiter.processes.recruiter import RecruiterConfig, RecruiterProcess
from recruiter.processes.worker.runtime import WorkerIdTaken, WorkerProcess
from recruiter.processes.worker.state import JobState, Running
from recruiter.store import SyncCollections, request_stop, strict
from recruiter.store.transactions import fenced_transaction
from tests.integration.test_processes_inproc import DEAD_AFTER_S, START, Harness, run, take_and_work
from tests.workables import (
    AlwaysFails,
    AsyncWaitForRelease,
    NeverReturns,
    Record,
    WaitForRelease,
    release,
)


async def started(h: Harness, job_id: ObjectId, count: int = 1) -> None:
    """Wait (real time, bounded) until the job's body has started ``count`` times."""
    for _ in range(500):
        if len(await h.ledger(job=str(job_id), event="start")) >= count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"job {job_id} did not start")


# -- liveness ------------------------------------------------------------------------------------


def test_a_job_running_three_times_considered_dead_after_on_a_live_worker_is_not_rescued(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id = await WaitForRelease(h.db_uri, "long").as_job_of(h.producer).retry_with(
            RetryManyTimes(3)).enqueue()
        process, slot = await h.worker("live")
        await h.round()
        assert await process.poll(slot) == job_id
        work = asyncio.create_task(process.work(slot, job_id))
        await started(h, job_id)
        cleaner = await h.cleaner()
        for _ in range(4):
            h.clock.advance(timedelta(seconds=DEAD_AFTER_S * 0.75))
            await process.heartbeat()
            assert await cleaner.lease.acquire()
            report = await cleaner.fenced_clean()
            assert report.dead_workers == 0
            assert report.unlocked_jobs == 0
            assert (await h.round()).assigned == 0
        assert h.clock.now() - START >= timedelta(seconds=3 * DEAD_AFTER_S)
        job = await h.job(job_id)
        assert job is not None
        assert job["locked"] is True
        assert job.get("crashes", 0) == 0

        release(h.db_uri, "long")
        await asyncio.wait_for(work, timeout=30)
        assert (await h.round()).applied == 1
        archived = await h.archived(job_id)
        assert archived is not None
        assert archived["why"] == "done"
        assert archived["attempts"] == 1
        assert archived.get("crashes", 0) == 0
        assert len(await h.ledger(job=str(job_id), event="start")) == 1

    run(db_uri, scenario)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_the_heartbeat_thread_is_restarted_when_it_dies(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        process, _slot = await h.worker("beating")
        views = process.heartbeats.view
        calls = 0

        def first_call_fails() -> Any:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise RuntimeError("injected: the heartbeat thread dies")
            return views()

        process.heartbeats.view = first_call_fails
        process.heartbeats.interval_s = 0.02
        process.heartbeats.start()
        try:
            for _ in range(500):
                if process.heartbeats._thread is not None and not process.heartbeats._thread.is_alive():
                    break
                await asyncio.sleep(0.01)
            process.heartbeats.ensure_alive()
            assert process.heartbeats.restarts == 1
            h.clock.advance(timedelta(seconds=7))
            for _ in range(500):
                entry = await h.heartbeat("beating")
                if entry is not None and entry["last_seen_at"] == h.clock.now():
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("the restarted heartbeat thread never beat")
        finally:
            process.heartbeats.stop()

    run(db_uri, scenario)


# -- fencing -------------------------------------------------------------------------------------


def test_a_restart_with_the_same_id_releases_its_jobs_and_fences_the_old_process(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id = await WaitForRelease(h.db_uri, "z").as_job_of(h.producer).retry_with(RetryManyTimes(3)).enqueue()
        old, old_slot = await h.worker("w")
        await h.round()
        assert await old.poll(old_slot) == job_id
        work = asyncio.create_task(old.work(old_slot, job_id))
        await started(h, job_id)
        await old.heartbeat()

        # While the old process heartbeats, its id is refused, in one line.
        with pytest.raises(WorkerIdTaken) as taken:
            await h.worker("w")
        assert "in use by pid" in str(taken.value)
        assert "\n" not in str(taken.value)

        # It goes silent (paused, or dead) for more than three heartbeat intervals: a new
        # process with the same id takes the entry over and releases the job as a crash.
        h.clock.advance(timedelta(seconds=16))
        new, new_slot = await h.worker("w")
        entry = await h.roster("w")
        assert entry is not None
        assert entry["session"] == new_slot.session != old_slot.session
        assert entry["available"] is True
        assert "assigned_to" not in entry
        assert "recovering" not in entry
        job = await h.job(job_id)
        assert job is not None
        assert job["locked"] is False
        assert job["crash_pending"] is True
        assert job["crashes"] == 1
        assert "was restarted" in job["last_execution"]["message"]

        # The old process learns it on its next write: its heartbeat halts the job, and since
        # a thread cannot be stopped, the process would end itself at once...
        await old.heartbeat()
        assert old_slot.running is not None
        assert old_slot.running.state is JobState.HALTED
        assert h.exits == [("w", 70)]
        release(h.db_uri, "z")
        await asyncio.wait_for(work, timeout=30)
        entry = await h.roster("w")
        assert entry is not None
        assert "outcome" not in entry
        # ...and (had it survived) it does not take the entry back.
        assert await old.poll(old_slot) is None
        assert old_slot.replaced

        assert (await h.round()).assigned == 1
        await take_and_work(new, new_slot)
        await h.round()
        archived = await h.archived(job_id)
        assert archived is not None
        assert archived["why"] == "done"
        assert archived["attempts"] == 2
        assert archived["crashes"] == 1
        assert [e["outcome"] for e in archived["executions"]] == ["crashed", "done"]

    run(db_uri, scenario)


def test_a_stale_recruiter_round_writes_nothing(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        first = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        second = await Record(h.db_uri, n=2).as_job_of(h.producer).enqueue()
        process, slot = await h.worker("w1")
        await h.round()
        await take_and_work(process, slot)  # an outcome waits in the roster
        await h.recruiter.lease.release()

        # The stale leader's clock stands still (a paused process): it believes it leads.
        stale = RecruiterProcess(h.db, ManualClock(h.clock.now()), RecruiterConfig(), owner="stale")
        assert await stale.lease.acquire()
        h.clock.advance(timedelta(seconds=RecruiterConfig().lease_ttl_s + 1))
        successor = RecruiterProcess(h.db, h.clock, RecruiterConfig(), owner="successor")
        assert await successor.lease.acquire()
        assert successor.lease.epoch == stale.lease.epoch + 1
        assert stale.lease.held, "the stale leader does not know"

        with pytest.raises(LostLease):
            await stale.fenced_round(rollback=True)
        assert await h.db.archived.count_documents({}) == 0
        entry = await h.roster("w1")
        assert entry is not None
        assert entry["outcome"]["job"] == first
        assert (await h.job(first))["locked"] is True
        assert (await h.job(second))["locked"] is False

        await process.heartbeat()  # the worker lives on
        report = await successor.fenced_round()
        assert report.applied == 1
        assert report.assigned == 1
        assert (await h.archived(first))["why"] == "done"
        assert (await h.job(second))["lock_epoch"] == successor.lease.epoch

    run(db_uri, scenario)


def test_a_leader_that_froze_inside_its_round_neither_blocks_its_successor_nor_commits(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id = await Record(h.db_uri).as_job_of(h.producer).enqueue()
        frozen = RecruiterProcess(h.db, h.clock, RecruiterConfig(), owner="frozen")
        assert await frozen.lease.acquire()
        other_client: AsyncMongoClient[Any] = AsyncMongoClient(h.db_uri, tz_aware=True,
                                                               event_listeners=strict.listeners())
        try:
            successor_db = other_client.get_default_database()
            successor = RecruiterProcess(successor_db, h.clock, RecruiterConfig(), owner="successor")
            async def frozen_round() -> None:
                async with fenced_transaction(h.db, frozen.lease) as inside:
                    # Mid-round: the fence is written (the lease document is locked by this
                    # transaction) and a job is locked; then the process freezes.
                    await inside.scheduled.update_one({"_id": job_id}, {"$set": {"locked": True}})
                    h.clock.advance(timedelta(seconds=RecruiterConfig().lease_ttl_s + 1))
                    # The successor is another process: its task does not share the frozen round's session.
                    takeover = asyncio.create_task(successor.lease.acquire(), context=contextvars.Context())
                    assert await asyncio.wait_for(takeover, timeout=10), "blocked by the frozen transaction"
                    # The frozen leader wakes up and commits: refused, its session was killed.

            with pytest.raises(PyMongoError):
                await frozen_round()
            assert (await h.job(job_id))["locked"] is False
            assert (await successor.fenced_round()).assigned == 0
            holder = await h.db.metadata.find_one({"_id": "recruiter"})
            assert holder["owner"] == "successor"
            assert holder["epoch"] == 2
        finally:
            await other_client.close()

    run(db_uri, scenario)


def test_a_stale_cleaner_pass_writes_nothing(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id = await Record(h.db_uri).as_job_of(h.producer).enqueue()
        process, slot = await h.worker("silent")
        await h.round()
        assert await process.poll(slot) == job_id
        config = CleanerConfig(considered_dead_after_s=DEAD_AFTER_S, lease_ttl_s=60.0)
        stale_clock = ManualClock(h.clock.now())
        stale = CleanerProcess(h.db, stale_clock, config, owner="stale-cleaner")
        assert await stale.lease.acquire()
        h.clock.advance(timedelta(seconds=61))
        successor = CleanerProcess(h.db, h.clock, config, owner="successor-cleaner")
        assert await successor.lease.acquire()
        stale_clock.advance(timedelta(seconds=DEAD_AFTER_S + 1))  # it sees the worker dead, and its lease held
        assert stale.lease.held

        with pytest.raises(LostLease):
            await stale.fenced_clean()
        assert await h.roster("silent") is not None
        assert (await h.job(job_id))["locked"] is True

        report = await successor.fenced_clean()
        assert report.dead_workers == 1
        assert report.unlocked_jobs == 1

    run(db_uri, scenario)


# -- shutdown ------------------------------------------------------------------------------------


def test_a_forced_stop_gives_the_job_back_without_burning_an_attempt(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        # DoNotDoItAgain (the default): had the attempt counted as a failure, the job would be archived.
        job_id = await h.producer.enqueue(AsyncWaitForRelease(h.db_uri, "stop"))
        process, slot = await h.worker("w1")
        await h.round()
        assert await process.poll(slot) == job_id
        work = asyncio.create_task(process.work(slot, job_id))
        await started(h, job_id)

        h.clock.advance(timedelta(seconds=5))
        process.force()
        await asyncio.wait_for(work, timeout=30)
        entry = await h.roster("w1")
        assert entry is not None
        assert entry["outcome"]["executed"] is False
        assert entry["outcome"]["decision"] == {"retry_at": h.clock.now()}
        assert entry["available"] is False
        assert entry["stopping"] is True

        assert (await h.round()).applied == 1
        job = await h.job(job_id)
        assert job is not None
        assert job["locked"] is False
        assert job["status"] == "retrying"
        assert job["attempts"] == 0
        assert job["scheduled_at"] == h.clock.now()
        interrupted = job["executions"][-1]
        assert interrupted["outcome"] == "interrupted"
        assert interrupted["worker"] == "w1"
        assert interrupted["started_at"] == START
        assert interrupted["ended_at"] == START + timedelta(seconds=5)
        assert "forced stop" in interrupted["message"]
        assert len(await h.ledger(job=str(job_id), event="end")) == 0, "the attempt was stopped"

        release(h.db_uri, "stop")
        other, other_slot = await h.worker("w2")
        assert (await h.round()).assigned == 1
        await take_and_work(other, other_slot)
        await h.round()
        archived = await h.archived(job_id)
        assert archived is not None
        assert archived["why"] == "done"
        assert archived["attempts"] == 1
        assert [e["outcome"] for e in archived["executions"]] == ["interrupted", "done"]

    run(db_uri, scenario)


def test_workers_stop_asks_through_the_roster(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        process, slot = await h.worker("remote-7")
        bystander, bystander_slot = await h.worker("remote-70x")
        assert request_stop(SyncCollections.of(h.sync_db).roster, ["remote-7"]) == ["remote-7"]
        assert await process.poll(slot) is None
        assert process.stopping.is_set()
        assert await bystander.poll(bystander_slot) is None
        assert not bystander.stopping.is_set()
        assert (await h.roster("remote-7"))["stop_requested"] is True
        assert "stop_requested" not in (await h.roster("remote-70x"))

    run(db_uri, scenario)


# -- poison jobs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("seen_running", [True, False], ids=["seen-running", "dies-before-its-first-beat"])
def test_a_job_that_keeps_killing_its_workers_stops(db_uri: str, seen_running: bool) -> None:
    async def scenario(h: Harness) -> None:
        job_id = await Record(h.db_uri).as_job_of(h.producer).retry_with(RetryManyTimes(10)).enqueue()
        # The default --max-crashes; a job whose workers die before a heartbeat shows it
        # running is first returned a few times, then counted as crashing.
        victims = 3 if seen_running else MAX_UNPROVEN_RETURNS + 3
        for i in range(victims):
            victim, victim_slot = await h.worker(f"victim-{i}")
            assert (await h.round()).assigned == 1
            assert await victim.poll(victim_slot) == job_id  # took it, then died
            if seen_running:
                locked = await h.job(job_id)
                victim_slot.running = Running(job_id, h.clock.now(), token=locked["lock_token"])
                await victim.heartbeat()
            h.clock.advance(timedelta(seconds=DEAD_AFTER_S + 1))
            report = await (await h.cleaner()).fenced_clean()
            assert report.dead_workers == 1
            assert report.unlocked_jobs == 1
        job = await h.job(job_id)
        assert job["crashes"] == 3
        assert job.get("unproven_returns", 0) == victims - 3

        survivor, survivor_slot = await h.worker("survivor")
        assert (await h.round()).assigned == 1
        await take_and_work(survivor, survivor_slot)
        await h.round()
        archived = await h.archived(job_id)
        assert archived is not None
        assert archived["why"] == "crashed-too-many-times"
        assert archived["crashes"] == 3
        assert archived["attempts"] == 3
        assert [e["outcome"] for e in archived["executions"]] == ["crashed"] * 3
        assert await h.ledger(job=str(job_id)) == [], "it never ran again"

    run(db_uri, scenario)


# -- archiving -----------------------------------------------------------------------------------


def crash_at(point: str) -> Any:
    def fault(name: str) -> None:
        if name == point:
            raise RuntimeError(f"injected crash at {name}")
    return fault


def test_a_crash_between_the_archive_writes_of_a_round_leaves_nothing_half_done(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id = await Record(h.db_uri, n=4).as_job_of(h.producer).enqueue()
        process, slot = await h.worker("w1")
        await h.round()
        await take_and_work(process, slot)

        h.recruiter.fault = crash_at("archive.between_insert_and_delete")
        with pytest.raises(RuntimeError, match="injected"):
            await h.round()
        # The round's transaction was not committed: the archived copy is gone with it.
        assert await h.db.archived.count_documents({}) == 0
        assert (await h.job(job_id))["locked"] is True
        assert (await h.roster("w1"))["outcome"]["job"] == job_id

        h.recruiter.fault = no_fault
        assert (await h.round()).applied == 1
        assert [d["_id"] for d in await h.db.archived.find().to_list()] == [job_id]
        assert await h.job(job_id) is None

    run(db_uri, scenario)


async def half_done_archive(h: Harness) -> tuple[ObjectId, WorkerProcess]:
    """A job run by worker ``w1`` whose outcome was applied outside a transaction up to
    the archived copy, then cut short before the delete from ``scheduled``."""
    job_id = await Record(h.db_uri, n=6).as_job_of(h.producer).enqueue()
    process, slot = await h.worker("w1")
    await h.round()
    await take_and_work(process, slot)
    entry = await h.roster("w1")
    assert entry is not None
    h.recruiter.fault = crash_at("archive.between_insert_and_delete")
    with pytest.raises(RuntimeError, match="injected"):
        await h.recruiter.apply_outcomes(h.recruiter.c, [entry], h.clock.now())  # unfenced: the insert stays
    h.recruiter.fault = no_fault
    return job_id, process


def test_a_half_done_archive_is_finished_by_the_next_round(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id, _ = await half_done_archive(h)
        first_copy = await h.archived(job_id)
        assert first_copy is not None
        assert (await h.job(job_id)) is not None

        h.clock.advance(timedelta(seconds=1))
        assert (await h.round()).applied == 1  # the outcome is still there: applied again, in a transaction
        assert await h.job(job_id) is None
        assert await h.db.archived.find().to_list() == [first_copy], "the archived copy is not written twice"
        assert (await h.roster("w1")).get("outcome") is None

    run(db_uri, scenario)


def test_a_half_done_archive_is_reconciled(db_uri: str) -> None:
    """Archived but still in scheduled (written outside a transaction, or a write the server lost)."""

    async def scenario(h: Harness) -> None:
        job_id, process = await half_done_archive(h)
        assert await h.db.archived.count_documents({"_id": job_id}) == 1
        assert (await h.job(job_id))["locked"] is True

        # The outcome is lost as well, so the recruiter cannot finish it: the cleaner's
        # sweep finds the stale lock, sees the archived copy and finishes the delete
        # instead of running the job again.
        await h.db.roster.update_one({"_id": "w1"}, {"$unset": {"outcome": ""}})
        cleaner = await h.cleaner()
        h.clock.advance(timedelta(seconds=DEAD_AFTER_S + 1))
        await process.heartbeat()
        assert await cleaner.lease.acquire()
        report = await cleaner.fenced_clean()
        assert report.unlocked_jobs == 0
        assert report.dead_workers == 0
        assert await h.job(job_id) is None
        archived = await h.db.archived.find().to_list()
        assert [(d["_id"], d["why"], d["attempts"]) for d in archived] == [(job_id, "done", 1)]
        assert (await h.round()).assigned == 0
        assert len(await h.ledger(job=str(job_id), event="start")) == 1

    run(db_uri, scenario)


# -- timeouts ------------------------------------------------------------------------------------


def test_synchronous_code_that_never_returns_is_stopped_by_its_timeout(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id = await NeverReturns(h.db_uri).as_job_of(h.producer).retry_with(RetryManyTimes(1, wait=0)).enqueue()
        assert (await h.job(job_id))["timeout_s"] == 0.5  # the class's timeout
        process, slot = await h.worker("w1")
        for _ in range(2):
            await h.settle()
            await asyncio.wait_for(take_and_work(process, slot), timeout=60)
        await h.settle()
        archived = await h.archived(job_id)
        assert archived is not None
        assert archived["why"] == "tried-too-many-times"
        assert [e["outcome"] for e in archived["executions"]] == ["timed-out", "timed-out"]
        assert archived["last_execution"]["class"] == "recruiter.child:JobTimedOut"
        starts = await h.ledger(job=str(job_id), event="start")
        assert len(starts) == 2
        for s in starts:
            assert s["child_pid"] != os.getpid(), "it ran in a child process"
            with pytest.raises(ProcessLookupError):
                os.kill(s["child_pid"], 0)  # which was killed

    run(db_uri, scenario)


def test_jobs_with_a_timeout_keep_their_results_and_exceptions(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        ok = await Record(h.db_uri, n=11).as_job_of(h.producer).with_timeout(30).enqueue()
        fails = await AlwaysFails(h.db_uri, "no luck").as_job_of(h.producer).with_timeout(30).enqueue()
        w1, s1 = await h.worker("w1")
        w2, s2 = await h.worker("w2")
        await h.round()
        await asyncio.wait_for(asyncio.gather(take_and_work(w1, s1), take_and_work(w2, s2)), timeout=60)
        await h.round()
        assert (await h.archived(ok))["result"] == 11
        failed = await h.archived(fails)
        assert failed is not None
        assert failed["why"] == "not-scheduled-by-retry-policy"
        last = failed["last_execution"]
        assert last["class"] == "builtins:ValueError"
        assert last["message"] == "no luck"
        assert "in execute" in last["trace"]
        assert "ValueError: no luck" in last["trace"]

    run(db_uri, scenario)
