"""Cancelling a job in each of its states, on the real server, step by step (see
``test_processes_inproc`` for the harness: no background loops, no sleeps)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import structlog
from bson import ObjectId

from recruiter.domain.builder import JobBuilder
from recruiter.domain.cancel import ALREADY_ARCHIVED, FINISHING, NOT_FOUND, RUNS_ON, WAS_ASSIGNED, WAS_WAITING
from recruiter.domain.retry import RetryManyTimes
from recruiter.processes.worker.heartbeat import JOB_TAKEN_AWAY, SlotView, beat
from recruiter.processes.worker.runtime import WorkerProcess
from recruiter.processes.worker.state import JobState, Running, Slot
from recruiter.store.layout import Collections
from tests.conftest import wait_for_async
from tests.integration.test_processes_inproc import Harness, run, take_and_work
from tests.workables import AlwaysFails, AsyncRecord, Record


async def assigned_to_w1(h: Harness, job: JobBuilder | None = None) -> tuple[ObjectId, WorkerProcess, Slot]:
    """``job`` (by default a Record) enqueued and assigned by a round to worker w1, which has not read it yet."""
    job_id = await (job or Record(h.db_uri, n=1).as_job_of(h.producer)).enqueue()
    process, slot = await h.worker("w1")
    assert (await h.round()).assigned == 1
    return job_id, process, slot


def test_a_waiting_job_is_archived_as_cancelled_and_never_runs(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        doomed = await Record(h.db_uri, n=1).as_job_of(h.producer).for_tenant("acme").enqueue()
        other = await Record(h.db_uri, n=2).as_job_of(h.producer).enqueue()

        result = await h.producer.cancel(str(doomed), reason="customer left")
        assert result.state == WAS_WAITING
        assert await h.job(doomed) is None
        archived = await h.archived(doomed)
        assert archived is not None
        assert archived["why"] == "cancelled"
        assert archived["done"] is False
        assert archived["cancel_reason"] == "customer left"
        assert archived["tenant"] == "acme"
        assert archived["attempts"] == 0
        assert archived["executions"] == []
        assert archived["archived_at"] == h.clock.now()

        process, slot = await h.worker("w1")
        await h.round()
        assert await take_and_work(process, slot) == other
        await h.round()
        assert [d["n"] for d in await h.ledger(event="start")] == [2]

        again = await h.producer.cancel(doomed)
        assert (again.state, again.why) == (ALREADY_ARCHIVED, "cancelled")
        assert (await h.producer.cancel(other)).why == "done"
        assert (await h.producer.cancel(ObjectId())).state == NOT_FOUND

    run(db_uri, scenario)


def test_a_job_waiting_for_its_retry_is_cancelled_with_its_history(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        failing = AlwaysFails(h.db_uri).as_job_of(h.producer).retry_with(RetryManyTimes(times=3))
        job_id, process, slot = await assigned_to_w1(h, failing)
        await take_and_work(process, slot)
        await h.round()  # the failure is applied: retrying
        job = await h.job(job_id)
        assert job is not None
        assert job["status"] == "retrying"
        assert job["locked"] is False

        assert (await h.producer.cancel(job_id)).state == WAS_WAITING
        archived = await h.archived(job_id)
        assert archived is not None
        assert archived["why"] == "cancelled"
        assert archived["attempts"] == 1
        assert [e["outcome"] for e in archived["executions"]] == ["failed"]
        assert await h.db.scheduled.count_documents({}) == 0

    run(db_uri, scenario)


def test_a_running_job_is_halted_its_outcome_discarded_and_its_worker_freed(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id, process, slot = await assigned_to_w1(h, AsyncRecord(h.db_uri, n=1, sleep_s=600).as_job_of(h.producer))
        assert await process.poll(slot) == job_id
        working = asyncio.create_task(process.work(slot, job_id))
        await wait_for_async(lambda: h.ledger(event="start"), message="the job to start")
        await process.heartbeat()  # shows it working on it
        beating = await h.heartbeat("w1")
        assert beating is not None
        assert beating["working_on"] == job_id

        h.clock.advance(timedelta(seconds=3))
        result = await h.producer.cancel(job_id, reason="not needed any more")
        assert (result.state, result.worker) == (WAS_ASSIGNED, "w1")
        archived = await h.archived(job_id)
        assert archived is not None
        assert archived["why"] == "cancelled"
        assert archived["attempts"] == 1
        last = archived["last_execution"]
        assert last["outcome"] == "cancelled"
        assert last["worker"] == "w1"
        assert last["message"] == "not needed any more"
        assert last["started_at"] == beating["working_since"]
        assert last["ended_at"] == h.clock.now()
        assert archived["executions"] == [last]
        assert await h.job(job_id) is None

        # The worker learns it at its next heartbeat: the job is cancelled, nothing recorded.
        await process.heartbeat()
        await asyncio.wait_for(working, timeout=10)
        assert await h.ledger(event="end") == []
        entry = await h.roster("w1")
        assert entry is not None
        assert entry["available"] is True
        assert "outcome" not in entry
        assert "working_on" not in entry
        assert "assigned_to" not in entry
        assert "halting" not in entry  # stopped: its slot is free, and the archived job says when
        assert h.exits == []
        assert await h.archived(job_id) == {**archived, "halt": {**archived["halt"], "ended_at": h.clock.now()}}

        # ...and takes the next job.
        following = await Record(h.db_uri, n=2).as_job_of(h.producer).enqueue()
        assert (await h.round()).assigned == 1
        assert await take_and_work(process, slot) == following

    run(db_uri, scenario)


def test_a_job_cancelled_before_its_worker_started_it(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id, process, slot = await assigned_to_w1(h)
        assert (await h.producer.cancel(job_id)).state == WAS_ASSIGNED
        archived = await h.archived(job_id)
        assert archived is not None
        assert archived["last_execution"]["started_at"] is None

        assert await process.poll(slot) is None  # nothing assigned any more...
        entry = await h.roster("w1")
        assert entry is not None
        assert entry["available"] is True
        following = await Record(h.db_uri, n=2).as_job_of(h.producer).enqueue()
        await h.round()
        assert await take_and_work(process, slot) == following
        assert [d["n"] for d in await h.ledger(event="start")] == [2]

    run(db_uri, scenario)


def test_a_job_whose_outcome_is_recorded_is_not_cancelled(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id, process, slot = await assigned_to_w1(h)
        await take_and_work(process, slot)  # outcome written, not applied yet

        result = await h.producer.cancel(job_id)
        assert (result.state, result.worker) == (FINISHING, "w1")
        await h.round()
        archived = await h.archived(job_id)
        assert archived is not None
        assert archived["why"] == "done"

    run(db_uri, scenario)


def test_an_outcome_that_loses_the_race_with_a_cancel_is_refused(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id, process, slot = await assigned_to_w1(h)
        assert await process.poll(slot) == job_id
        job = await h.job(job_id)
        assert job is not None
        bound = structlog.get_logger("test").bind(worker_id=slot.id)
        slot.running = Running(job_id, h.clock.now())
        outcome = await process.executor.attempt(slot.id, slot.running, job, bound)  # the job ran...
        assert outcome is not None
        assert outcome.executed

        assert (await h.producer.cancel(job_id)).state == WAS_ASSIGNED  # ...and is cancelled before recording
        await process.record(slot, outcome, bound)
        slot.running = None
        entry = await h.roster("w1")
        assert entry is not None
        assert "outcome" not in entry
        assert entry["available"] is True
        assert (await h.round()).applied == 0
        archived = await h.archived(job_id)
        assert archived is not None
        assert archived["why"] == "cancelled"

    run(db_uri, scenario)


def test_a_halted_thread_job_keeps_its_worker_alive_without_reporting_it(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id, process, slot = await assigned_to_w1(h)
        assert await process.poll(slot) == job_id
        # A synchronous job without a timeout runs in a thread, which cannot be stopped.
        slot.running = Running(job_id, h.clock.now(), in_thread=True)
        await process.heartbeat()
        assert (await h.producer.cancel(job_id)).state == RUNS_ON  # the beat showed it in a thread

        await process.heartbeat()
        assert slot.running.state is JobState.HALTED
        assert h.exits == []
        h.clock.advance(timedelta(seconds=20))
        await process.heartbeat()  # the thread still runs: the slot beats as an idle one
        beating = await h.heartbeat("w1")
        assert beating is not None
        assert beating["last_seen_at"] == h.clock.now()
        assert beating["working"] is False
        entry = await h.roster("w1")
        assert entry is not None
        assert entry["available"] is False

    run(db_uri, scenario)


def test_a_cancel_event_replaces_a_delivered_copy_not_started_yet(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id, process, slot = await assigned_to_w1(h)
        entry = await h.roster("w1")
        assert entry is not None
        process.inboxes.delivered("w1", entry["job"])  # the assignment's event...
        assert slot.inbox.delivered is not None
        assert (await h.producer.cancel(job_id)).state == WAS_ASSIGNED
        process.inboxes.delivered("w1", None)  # ...then the cancel's (job: null), before the slot ran
        assert slot.inbox.delivered is None
        assert slot.inbox.must_poll
        assert await process.poll(slot) is None
        assert (await h.roster("w1") or {}).get("available") is True

    run(db_uri, scenario)


def test_a_worker_too_busy_to_halt_a_cancelled_job_still_heartbeats(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id, process, slot = await assigned_to_w1(h)
        assert await process.poll(slot) == job_id
        busy = SlotView("w1", slot.session, job_id, h.clock.now())
        assert beat(Collections.of(h.sync_db), h.clock, 5.0, [busy], process.heartbeats.key) == []
        assert (await h.producer.cancel(job_id)).state == WAS_ASSIGNED

        # The event loop is blocked, so the slot still looks busy with the job at every beat.
        for _ in range(2):
            h.clock.advance(timedelta(seconds=20))
            lost = beat(Collections.of(h.sync_db), h.clock, 5.0, [busy], process.heartbeats.key)
            assert lost == [(busy, JOB_TAKEN_AWAY)]
            beating = await h.heartbeat("w1")
            assert beating is not None
            assert beating["last_seen_at"] == h.clock.now()

    run(db_uri, scenario)
