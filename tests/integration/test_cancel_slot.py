"""A cancelled job holds its ``max_running`` slot until its worker has stopped it, on the real
server, step by step (the harness of ``test_processes_inproc``: no background loops, no sleeps)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from bson import ObjectId

from recruiter.admin import Admin
from recruiter.domain.cancel import RUNS_ON, WAS_ASSIGNED
from recruiter.processes.worker.config import EXIT_FENCED
from recruiter.processes.worker.runtime import WorkerProcess
from recruiter.processes.worker.state import JobState, Running, Slot
from tests.integration.test_processes_inproc import DEAD_AFTER_S, Harness, run
from tests.workables import Record


async def capped_and_running(h: Harness, *, in_thread: bool) -> tuple[ObjectId, ObjectId, WorkerProcess, Slot]:
    """Group ``pay`` capped at 1; its first job running on w1 (shown by a beat), its second queued."""
    Admin(h.sync_db, h.clock).set_limit("pay", max_running=1)
    running_id = await Record(h.db_uri, n=1).as_job_of(h.producer).in_group("pay").enqueue()
    process, slot = await h.worker("w1")
    assert (await h.round()).assigned == 1
    queued_id = await Record(h.db_uri, n=2).as_job_of(h.producer).in_group("pay").enqueue()
    await h.worker("w2")
    assert (await h.round()).assigned == 0  # the cap: one pay job runs
    assert await process.poll(slot) == running_id
    slot.running = Running(running_id, h.clock.now(), in_thread=in_thread)
    await process.heartbeat()  # shows it running (in a thread or not)
    return running_id, queued_id, process, slot


def running_pay(h: Harness) -> int:
    (view,) = Admin(h.sync_db, h.clock).limits().limits
    assert view.group == "pay"
    return int(view.running)


async def halting_of(h: Harness, worker_id: str) -> Any:
    return (await h.roster(worker_id) or {}).get("halting")


def test_a_cancelled_job_running_on_in_its_thread_keeps_its_slot_until_its_worker_reports_it_stopped(
        db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        running_id, queued_id, process, slot = await capped_and_running(h, in_thread=True)
        h.clock.advance(timedelta(seconds=2))
        cancelled_at = h.clock.now()
        result = await h.producer.cancel(running_id)
        assert (result.state, result.worker) == (RUNS_ON, "w1")
        assert "still running in a thread on worker w1 until it returns" in result.describe()
        assert "its slot is held until then" in result.describe()
        assert await halting_of(h, "w1") == {"job": running_id, "group": "pay", "tenant": None,
                                             "since": cancelled_at}
        archived = await h.archived(running_id)
        assert archived is not None
        assert archived["why"] == "cancelled"
        assert archived["halt"] == {"worker": "w1", "session": slot.session, "in_thread": True,
                                    "requested_at": cancelled_at, "ended_at": None}

        # The job is no longer in the queue, but it runs: the cap holds the queued job back.
        assert await h.job(running_id) is None
        assert (await h.round()).assigned == 0
        assert running_pay(h) == 1
        await process.heartbeat()  # the worker learns it: halted, but a thread runs on
        assert slot.running.state is JobState.HALTED
        h.clock.advance(timedelta(seconds=20))
        await process.heartbeat()
        assert (await h.round()).assigned == 0
        assert await halting_of(h, "w1") is not None

        # The thread returns: the slot's "available again" write frees the slot and dates the end.
        await process.entries.release(slot)
        slot.running = None
        assert await halting_of(h, "w1") is None
        archived = await h.archived(running_id)
        assert archived is not None
        assert archived["halt"]["ended_at"] == h.clock.now()
        assert running_pay(h) == 0
        assert (await h.round()).assigned == 1
        assert (await h.job(queued_id) or {}).get("locked") is True

    run(db_uri, scenario)


def test_an_async_job_is_reported_halted_and_holds_its_slot_until_it_stopped(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        running_id, _, process, slot = await capped_and_running(h, in_thread=False)
        result = await h.producer.cancel(running_id)
        assert (result.state, result.worker) == (WAS_ASSIGNED, "w1")
        assert "its slot is held until it has stopped" in result.describe()
        assert (await h.round()).assigned == 0  # not stopped yet: the worker learns it at its next beat
        await process.heartbeat()
        assert slot.running.state is JobState.HALTED
        await process.entries.release(slot)  # the task cancelled, the slot is free
        assert (await h.round()).assigned == 1
        archived = await h.archived(running_id)
        assert archived is not None
        assert archived["halt"]["in_thread"] is False
        assert archived["halt"]["ended_at"] == h.clock.now()

    run(db_uri, scenario)


def test_a_dead_workers_cancelled_job_frees_its_slot_when_the_cleaner_removes_the_worker(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        running_id, queued_id, process, slot = await capped_and_running(h, in_thread=True)
        assert (await h.producer.cancel(running_id)).state == RUNS_ON
        await process.heartbeat()
        assert slot.running.state is JobState.HALTED
        h.clock.advance(timedelta(seconds=DEAD_AFTER_S + 1))
        cleaner = await h.cleaner()
        await h.worker("w3")  # a live worker for the queued job
        assert (await cleaner.clean(cleaner.c)).dead_workers >= 1
        assert await h.roster("w1") is None  # its process is gone, and its thread with it
        halt = (await h.archived(running_id) or {})["halt"]
        assert (halt["ended_at"], halt["worker_gone"]) == (h.clock.now(), True)
        assert (await h.round()).assigned == 1
        assert (await h.job(queued_id) or {}).get("locked") is True
        # Had the worker only been silent (stopped, not dead), its next beat finds the entry that
        # kept its thread counted gone: it ends at once rather than run on uncounted.
        assert h.exits == []
        await process.heartbeat()
        assert h.exits == [("w1", EXIT_FENCED)]

    run(db_uri, scenario)


def test_an_entry_released_by_an_older_worker_that_leaves_halting_behind_holds_no_slot(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        running_id, queued_id, _, _ = await capped_and_running(h, in_thread=True)
        assert (await h.producer.cancel(running_id)).state == RUNS_ON
        assert (await h.round()).assigned == 0
        # An older worker's "available again" write does not know halting: it stays in the entry.
        await h.db.roster.update_one({"_id": "w1"}, {"$set": {"available": True, "freed": ObjectId()}})
        assert await halting_of(h, "w1") is not None
        assert running_pay(h) == 0
        assert (await h.round()).assigned == 1
        assert (await h.job(queued_id) or {}).get("locked") is True
        assert running_pay(h) == 1  # the new job, whichever entry runs it: halting is not counted again

    run(db_uri, scenario)
