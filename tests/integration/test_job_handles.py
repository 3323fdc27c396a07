"""Job handles on the real server: states, results, failures, timeouts, bad ids, and
waiting with one change stream per producer or by polling. The recruiter and the worker
are driven step by step (``test_processes_inproc``'s harness); a sync wait runs in a
thread meanwhile. No sleeps: every wait has a deadline."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import pytest
from bson import ObjectId

from bench.commands import Commands
from recruiter import AsyncJobHandle, AsyncRecruiter, JobFailed, JobHandle, JobNotFound, Recruiter
from recruiter.domain.following import Progress
from recruiter.domain.retry import RetryManyTimes
from recruiter.processes.worker.runtime import WorkerProcess
from recruiter.processes.worker.state import Running, Slot
from recruiter.producer.shared_stream import AsyncWaitHub, Status, WaitHub
from tests.conftest import wait_for_async
from tests.integration.test_processes_inproc import Harness, run, take_and_work
from tests.workables import AlwaysFails, Record

WRITES = {"insert", "update", "delete", "findAndModify", "bulkWrite", "commitTransaction"}


def streams_opened(commands: Commands) -> int:
    """Change streams opened on ``archived``: aggregates whose pipeline starts with $changeStream."""
    return sum(1 for cmd in commands.named("aggregate", "archived") if "$changeStream" in cmd["pipeline"][0])


def joined(hub: WaitHub | AsyncWaitHub) -> bool:
    """Whether a wait has joined the producer's stream, and the stream is open."""
    return bool(hub.fanout.watches) and hub.fanout.status is Status.OPEN


def writes(commands: Commands) -> list[str]:
    return [name for name, _, _ in commands.events if name in WRITES]


@contextlib.contextmanager
def sync_producer(h: Harness, **options: Any) -> Iterator[tuple[Recruiter, Commands]]:
    """A sync producer on the harness's database and clock, its commands recorded."""
    commands = Commands()
    rec = Recruiter.connect(h.db_uri, clock=h.clock, event_listeners=[commands], **options)
    try:
        yield rec, commands
    finally:
        rec.close()


@contextlib.asynccontextmanager
async def async_producer(h: Harness, **options: Any) -> AsyncIterator[tuple[AsyncRecruiter, Commands]]:
    commands = Commands()
    rec = await AsyncRecruiter.connect(h.db_uri, clock=h.clock, event_listeners=[commands], **options)
    async with rec:
        yield rec, commands


async def run_once(h: Harness, process: WorkerProcess, slot: Slot) -> ObjectId:
    """One attempt of the next job: assigned by a round, run by the worker, its outcome applied."""
    await process.heartbeat()  # fresh, whatever the clock did
    await h.round()  # assigns it, unless the round that applied the last outcome did
    job_id = await take_and_work(process, slot)
    assert (await h.round()).applied == 1
    return job_id


def test_a_handle_follows_its_job_through_every_state(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        policy = RetryManyTimes(times=1, wait=timedelta(seconds=10))
        job = await AlwaysFails(h.db_uri).as_job_of(h.producer).retry_with(policy).for_tenant("acme").enqueue()
        later = await Record(h.db_uri, n=2).as_job_of(h.producer).schedule_in(minutes=5).enqueue()
        assert isinstance(job, AsyncJobHandle)
        # Built from the enqueued document: no read.
        assert (job.state, job.attempts, job.worker, job.why, job.finished) == ("queued", 0, None, None, False)
        assert job.view.tenant == "acme"
        assert job.view.class_name == "tests.workables:AlwaysFails"
        assert job.view.document["workable"] == {"class": "tests.workables:AlwaysFails"}  # parameters not kept
        assert later.state == "delayed"
        assert (await later.refresh()).state == "delayed"

        process, slot = await h.worker("w1")
        assert (await h.round()).assigned == 1
        view = await job.refresh()
        assert (view.state, job.state, job.worker, job.attempts) == ("assigned", "assigned", "w1", 1)

        # Its worker's heartbeat shows it running (and the progress the job reported).
        locked = await h.job(job)
        assert locked is not None
        slot.running = Running(job.id, h.clock.now(), token=locked["lock_token"])
        await process.heartbeat()
        await h.db.heartbeats.update_one({"ids": "w1"}, {"$set": {"slots.w1.progress": {
            "value": 0.4, "message": "copied 4 of 10 files", "at": h.clock.now()}}})
        await job.refresh()
        assert (job.state, job.worker) == ("running", "w1")
        assert job.progress == Progress(0.4, "copied 4 of 10 files", h.clock.now())
        slot.running = None

        await process.work(slot, job.id)
        assert (await h.round()).applied == 1
        await job.refresh()
        assert (job.state, job.attempts, job.worker, job.progress) == ("retrying", 1, None, None)
        assert [e["attempt"] for e in job.executions] == [1]
        assert job.last_execution is not None
        assert job.last_execution["message"] == "boom"

        h.clock.advance(timedelta(seconds=10))
        await run_once(h, process, slot)
        await job.refresh()
        assert (job.state, job.why, job.attempts, job.finished, job.result) == (
            "archived", "tried-too-many-times", 2, True, None)
        assert [e["attempt"] for e in job.executions] == [1, 2]

        # The sync producer sees the same, from the id or its text.
        with sync_producer(h) as (rec, _):
            for ref in (job, job.id, str(job)):
                again = rec.job(ref)
                assert isinstance(again, JobHandle)
                assert again == job
                assert type(again.id) is ObjectId
                assert (again.state, again.why, again.attempts) == ("archived", "tried-too-many-times", 2)
            assert rec.job(later).state == "delayed"

    run(db_uri, scenario)


def test_wait_returns_the_result_sync_and_async_with_one_stream_per_producer(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        process, slot = await h.worker("w1")
        with sync_producer(h) as (rec, commands):
            job = rec.enqueue(Record(h.db_uri, n=7))
            assert isinstance(job, JobHandle)
            assert h.db.name == rec.db.name
            assert await h.job(job) is not None
            waiting = asyncio.create_task(asyncio.to_thread(job.wait, 30))
            async with async_producer(h) as (arec, acommands):
                ajob = await arec.job(job)
                awaiting = asyncio.create_task(ajob.wait(timeout=30))
                awaited = asyncio.create_task(arec.job(job))
                await wait_for_async(lambda: asyncio.sleep(0, streams_opened(commands) == 1
                                                           and streams_opened(acommands) == 1),
                                     message="both waits to open their stream")
                assert await run_once(h, process, slot) == job
                assert await waiting == 7
                assert await awaiting == 7
                assert await (await awaited) == 7  # await handle == await handle.wait()
                assert (ajob.state, ajob.why, ajob.result) == ("archived", "done", 7)
                assert streams_opened(acommands) == 1  # one for both waits: ajob.wait() and await handle
            assert (job.state, job.why, job.result, job.attempts, job.finished) == ("archived", "done", 7, 1, True)
            assert job.view.executions[0]["worker"] == "w1"
            assert streams_opened(commands) == 1
            assert writes(commands) == ["insert"]  # the enqueue, and nothing else

            # A finished handle answers at once, without a read.
            commands.clear()
            assert job.wait(timeout=0) == 7
            # Not the stream's own getMore or killCursors: its reader thread reads on until idle for IDLE_CLOSE_S.
            assert [name for name, _, _ in commands.events if name not in ("getMore", "killCursors")] == []
            # A job already archived when the wait starts is found by its first read.
            assert rec.job(job).wait(timeout=0) == 7

    run(db_uri, scenario)


def test_wait_raises_job_failed_with_the_last_execution_and_its_trace(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        process, slot = await h.worker("w1")
        with sync_producer(h) as (rec, _):
            job = AlwaysFails(h.db_uri, message="card declined").as_job_of(rec).retry_with(RetryManyTimes(1)).enqueue()
            waiting = asyncio.create_task(asyncio.to_thread(job.wait, 30))
            await run_once(h, process, slot)
            await run_once(h, process, slot)
            with pytest.raises(JobFailed) as caught:
                await waiting
            failure = caught.value
            assert str(failure) == f"job {job} ended tried-too-many-times: ValueError: card declined"
            assert (failure.job_id, failure.why, failure.reason) == (job, "tried-too-many-times", None)
            assert failure.execution is not None
            assert failure.execution["class"] == "builtins:ValueError"
            assert failure.execution["attempt"] == 2
            assert failure.trace is not None
            assert "raise ValueError(self.message)" in failure.trace
            assert failure.trace.rstrip().endswith("ValueError: card declined")
            assert failure.view.attempts == 2
            assert job.state == "archived"
            # Waiting again raises again, at once, from the handle's view.
            with pytest.raises(JobFailed, match="tried-too-many-times"):
                job.wait()

    run(db_uri, scenario)


def test_waiting_on_a_cancelled_job_raises_job_failed_cancelled(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        async with async_producer(h) as (rec, commands):
            job = await rec.enqueue(Record(h.db_uri, n=1))
            waiting = asyncio.create_task(job.wait(timeout=30))
            await wait_for_async(lambda: asyncio.sleep(0, streams_opened(commands) == 1), message="the stream")
            assert (await rec.cancel(job, reason="not needed")).state == "cancelled"
            with pytest.raises(JobFailed) as caught:
                await waiting
            assert caught.value.why == "cancelled"
            assert str(caught.value) == f"job {job} ended cancelled"
            # Cancelled before the wait: the first read finds it.
            other = await rec.enqueue(Record(h.db_uri, n=2))
            await rec.cancel(str(other))
            with pytest.raises(JobFailed, match=f"^job {other} ended cancelled$"):
                await (await rec.job(other))

    run(db_uri, scenario)


def test_a_timeout_leaves_the_job_untouched(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        await h.worker("w1")
        with sync_producer(h) as (rec, commands):
            job = rec.enqueue(Record(h.db_uri, n=1))
            assert (await h.round()).assigned == 1  # assigned: a wait must not disturb it
            before = (await h.job(job), await h.roster("w1"))
            commands.clear()
            started = time.monotonic()
            with pytest.raises(TimeoutError, match=rf"^job {job} did not finish within 0.3s \(it was left as it is\)$"):
                await asyncio.to_thread(job.wait, 0.3)
            assert 0.3 <= time.monotonic() - started < 3
            with pytest.raises(TimeoutError, match=r"^1 of 1 jobs|^job "):
                await asyncio.to_thread(rec.wait_all, [job], 0.1)
            assert writes(commands) == []
            assert (await h.job(job), await h.roster("w1")) == before
            assert await h.archived(job) is None

        async with async_producer(h) as (arec, acommands):
            ajob = await arec.job(job)
            second = await arec.enqueue(Record(h.db_uri, n=2))
            acommands.clear()
            with pytest.raises(TimeoutError, match=r"^2 of 2 jobs did not finish within 0.2s"):
                await arec.wait_all([ajob, second], timeout=0.2)
            with pytest.raises(TimeoutError):
                async for _ in arec.as_completed([ajob], timeout=0):
                    pass
            assert writes(acommands) == []
            assert await h.job(job) == before[0]
        with pytest.raises(ValueError, match=r"^timeout must be None or a number of seconds >= 0, got -1$"):
            await ajob.wait(timeout=-1)

    run(db_uri, scenario)


def test_unknown_and_malformed_ids(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        unknown = ObjectId()
        with sync_producer(h) as (rec, commands):
            with pytest.raises(JobNotFound, match=f"^no job {unknown}: neither waiting nor archived$"):
                rec.job(unknown)
            with pytest.raises(JobNotFound):
                rec.job(str(unknown))
            for bad in ("nope", "65a0", str(unknown) + "0"):
                with pytest.raises(ValueError, match=r"^'.*' is not a job id \(24 hexadecimal digits\)$"):
                    rec.job(bad)
            # A job removed from under a handle (deleted by hand, or archived and expired): no endless wait.
            gone = rec.enqueue(Record(h.db_uri, n=1))
            kept = rec.enqueue(Record(h.db_uri, n=2))
            await h.db.scheduled.delete_one({"_id": gone})
            with pytest.raises(JobNotFound, match=f"^no job {gone}"):
                gone.wait(timeout=30)
            assert writes(commands) == ["insert", "insert"]  # the enqueues
            await rec_cancel(rec, kept)
            results = rec.wait_all([kept, gone], timeout=30, return_exceptions=True)
            assert isinstance(results[0], JobFailed)
            assert results[0].why == "cancelled"
            assert isinstance(results[1], JobNotFound)
            assert results[1].job_id == gone
        async with async_producer(h) as (arec, _):
            with pytest.raises(JobNotFound):
                await arec.job(unknown)
            with pytest.raises(ValueError, match="is not a job id"):
                await arec.job("zz" * 12)

    run(db_uri, scenario)


async def rec_cancel(rec: Recruiter, job: JobHandle) -> None:
    assert (await asyncio.to_thread(rec.cancel, job)).state == "cancelled"


def test_wait_all_and_as_completed_share_one_stream(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        process, slot = await h.worker("w1")
        with sync_producer(h) as (rec, commands):
            jobs = rec.enqueue_many([Record(h.db_uri, n=1), AlwaysFails(h.db_uri), Record(h.db_uri, n=3)])
            assert all(isinstance(j, JobHandle) and j.state == "queued" for j in jobs)
            gathered = asyncio.create_task(asyncio.to_thread(rec.wait_all, jobs, 30, return_exceptions=True))
            seen: list[JobHandle] = []

            def follow() -> None:
                seen.extend(rec.as_completed(list(reversed(jobs)), timeout=30))

            following = asyncio.create_task(asyncio.to_thread(follow))
            await wait_for_async(lambda: asyncio.sleep(0, len(rec.waits.fanout.watches) == 2), message="two waits")
            for n in range(3):
                await run_once(h, process, slot)
                await wait_for_async(lambda n=n: asyncio.sleep(0, len(seen) == n + 1), message=f"{n + 1} seen")
            results = await gathered
            await following
            assert results[0] == 1
            assert results[2] == 3
            assert isinstance(results[1], JobFailed)
            assert results[1].why == "not-scheduled-by-retry-policy"
            assert seen == jobs  # in the order they ended (FIFO), not the order given
            assert [j.finished for j in seen] == [True] * 3
            assert streams_opened(commands) == 1  # one per producer, not one per call or per job
            with pytest.raises(JobFailed, match=f"^job {jobs[1]} ended not-scheduled-by-retry-policy"):
                rec.wait_all(jobs)  # fails at the first failure, in the handles' order
            assert rec.wait_all([jobs[2], jobs[0], jobs[2]]) == [3, 1, 3]
            assert rec.wait_all([]) == []

    run(db_uri, scenario)


def test_as_completed_in_asyncio_and_a_failure_met_first(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        process, slot = await h.worker("w1")
        async with async_producer(h) as (rec, commands):
            failing = await rec.enqueue(AlwaysFails(h.db_uri))
            fine = await rec.enqueue(Record(h.db_uri, n=5))
            gathered = asyncio.create_task(rec.wait_all([fine, failing], timeout=30))
            await wait_for_async(lambda: asyncio.sleep(0, streams_opened(commands) == 1), message="the stream")
            await run_once(h, process, slot)
            # The first failure is raised as soon as it is met; the other job runs on.
            with pytest.raises(JobFailed, match=f"^job {failing} ended"):
                await gathered
            assert failing.finished
            assert not fine.finished
            order = []
            async for done in rec.as_completed([fine, failing], timeout=30):
                order.append(done)
                if done is failing:
                    await run_once(h, process, slot)
            assert order == [failing, fine]
            assert await fine == 5
            assert streams_opened(commands) == 1  # the second call joined the stream of the first

    run(db_uri, scenario)


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_waits_poll_archived_when_change_streams_are_off(db_uri: str, flavour: str) -> None:
    async def scenario(h: Harness) -> None:
        process, slot = await h.worker("w1")
        if flavour == "sync":
            with sync_producer(h, change_streams=False) as (rec, commands):
                jobs = rec.enqueue_many([Record(h.db_uri, n=n) for n in range(3)])
                gathered = asyncio.create_task(asyncio.to_thread(rec.wait_all, jobs, 30))
                await poll_reads(commands, 2)
                for _ in jobs:
                    await run_once(h, process, slot)
                assert await gathered == [0, 1, 2]
                assert rec.streams.opened == 0
        else:
            async with async_producer(h, change_streams=False) as (arec, commands):
                ajobs = await arec.enqueue_many([Record(h.db_uri, n=n) for n in range(3)])
                gathered = asyncio.create_task(arec.wait_all(ajobs, timeout=30))
                await poll_reads(commands, 2)
                for _ in ajobs:
                    await run_once(h, process, slot)
                assert await gathered == [0, 1, 2]
        assert streams_opened(commands) == 0
        assert writes(commands) == ["insert", "commitTransaction"]  # enqueue_many: one transaction

    run(db_uri, scenario)


async def poll_reads(commands: Commands, at_least: int) -> None:
    """Wait until the producer has read ``archived`` ``at_least`` times (it is polling)."""
    await wait_for_async(lambda: asyncio.sleep(0, len(commands.named("find", "archived")) >= at_least),
                         message="the wait to poll archived")


class StreamCursors(Commands):
    """Also keeps the cursor id of each change stream opened on ``archived``."""

    def __init__(self) -> None:
        super().__init__()
        self.cursor_ids: list[int] = []

    def succeeded(self, event: Any) -> None:
        super().succeeded(event)
        cursor = event.reply.get("cursor") or {}
        if event.command_name == "aggregate" and cursor.get("ns", "").endswith(".archived"):
            self.cursor_ids.append(cursor["id"])


def test_a_wait_outlives_its_stream_killed_by_the_server(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        process, slot = await h.worker("w1")
        commands = StreamCursors()
        rec = Recruiter.connect(h.db_uri, clock=h.clock, event_listeners=[commands])
        try:
            jobs = rec.enqueue_many([Record(h.db_uri, n=1), Record(h.db_uri, n=2)])
            gathered = asyncio.create_task(asyncio.to_thread(rec.wait_all, jobs, 30))
            await wait_for_async(lambda: asyncio.sleep(0, commands.cursor_ids), message="the stream")
            await run_once(h, process, slot)
            killed = await h.db.command("killCursors", "archived", cursors=commands.cursor_ids[:1])
            assert killed["cursorsKilled"] == commands.cursor_ids[:1]
            await run_once(h, process, slot)
            assert await gathered == [1, 2]
            # The driver resumes the stream (a second aggregate, after the last event seen). If the
            # kill met a getMore in flight, SecantusDB may answer it as an exhausted cursor; the
            # driver then ends the stream without an error, and the wait polls (it used to hang).
            assert writes(commands) == ["insert", "commitTransaction"]  # enqueue_many: one transaction
        finally:
            rec.close()

    run(db_uri, scenario)


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_wait_outlives_its_stream_ended_by_the_server(db_uri: str, flavour: str) -> None:
    """Dropping ``archived`` invalidates the stream: the driver then answers "no event" for
    ever, without an error. The wait notices the stream is dead and polls."""
    async def scenario(h: Harness) -> None:
        process, slot = await h.worker("w1")
        async with async_producer(h) as (arec, acommands):
            before = await arec.enqueue(Record(h.db_uri, n=0))
            await run_once(h, process, slot)  # archived exists, so its drop invalidates
            assert (await before.wait(timeout=10)) == 0
            with sync_producer(h) as (rec, scommands):
                commands = scommands if flavour == "sync" else acommands
                hub = rec.waits if flavour == "sync" else arec.waits
                if flavour == "sync":
                    job = rec.enqueue(Record(h.db_uri, n=1))
                    waited = asyncio.create_task(asyncio.to_thread(job.wait, 20))
                else:
                    ajob = await arec.enqueue(Record(h.db_uri, n=1))
                    waited = asyncio.create_task(ajob.wait(timeout=20))
                await wait_for_async(lambda: asyncio.sleep(0, joined(hub)), message="the wait to join the stream")
                opened = streams_opened(commands)
                await h.db.archived.drop()
                await run_once(h, process, slot)
                assert await waited == 1
                assert streams_opened(commands) > opened  # the ended stream was opened again

    run(db_uri, scenario)


def test_a_wait_reads_only_its_own_jobs_from_the_shared_stream(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        process, slot = await h.worker("w1")
        async with async_producer(h) as (rec, commands):
            other = await rec.enqueue(Record(h.db_uri, n=0))  # archived while the wait runs, not waited for
            jobs = await rec.enqueue_many([Record(h.db_uri, n=1), Record(h.db_uri, n=2)])
            gathered = asyncio.create_task(rec.wait_all(jobs, timeout=30))
            await wait_for_async(lambda: asyncio.sleep(0, streams_opened(commands) == 1), message="the stream")
            (stream,) = [c for c in commands.named("aggregate", "archived") if "$changeStream" in c["pipeline"][0]]
            assert "documentKey._id" not in stream["pipeline"][1]["$match"]  # every archived job's event
            for _ in range(3):
                await run_once(h, process, slot)
            assert await gathered == [1, 2]
            assert (await rec.job(other)).result == 0
            # The other job's event was dropped in the producer: its document was not read by the wait.
            reads = [c["filter"] for c in commands.named("find", "archived")]
            assert {"_id": {"$in": [other.id]}} not in reads

    run(db_uri, scenario)
