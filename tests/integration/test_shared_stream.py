"""All the waits of one producer share one change stream (issue 40), on the real server:
200 waits at once in threads or in tasks open one stream and each gets its own job's
outcome; waits that start while it is open join it; it closes once idle; a stream killed
under the waits, or an event it never delivers, loses no wake-up. No sleeps: every
wait has a deadline. (Polling without streams: test_job_handles.)"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from bson import ObjectId

from bench.commands import Commands
from recruiter import AsyncRecruiter, JobFailed, Recruiter
from recruiter.processes.worker.runtime import WorkerProcess
from recruiter.processes.worker.state import Slot
from tests.conftest import wait_for_async
from tests.integration.test_job_handles import StreamCursors, async_producer, run_once, streams_opened, sync_producer
from tests.integration.test_processes_inproc import Harness, run
from tests.workables import Record

N = 200
RAN = 2  # of the N jobs, those run by the worker (the others are cancelled, each with its own reason)


def outcome_of(call: Callable[[], Any]) -> tuple[object, ...]:
    """What a wait gave: ``("result", value)`` or ``("failed", job id, the reason it was cancelled)``."""
    try:
        return ("result", call())
    except JobFailed as failure:
        return ("failed", failure.job_id, failure.view.document.get("cancel_reason"))


async def outcome_of_async(wait: Awaitable[object]) -> tuple[object, ...]:
    try:
        return ("result", await wait)
    except JobFailed as failure:
        return ("failed", failure.job_id, failure.view.document.get("cancel_reason"))


def expected(jobs: list[ObjectId]) -> list[tuple[object, ...]]:
    return [("result", i) if i < RAN else ("failed", job, f"no {i}") for i, job in enumerate(jobs)]


def first_looks(commands: Commands) -> int:
    """Reads of ``archived`` by ``_id`` made so far (each wait makes one first, once it has joined)."""
    return len(commands.named("find", "archived"))


async def end_them_all(h: Harness, process: WorkerProcess, slot: Slot, jobs: list[ObjectId],
                       kill: Callable[[], Awaitable[None]] | None = None) -> None:
    """The jobs after the first ``RAN`` cancelled (``kill`` run at half way), then the first ``RAN`` run by
    the worker."""
    async def cancel(i: int) -> None:
        assert (await h.producer.cancel(jobs[i], reason=f"no {i}")).state == "cancelled"

    half = len(jobs) // 2
    await asyncio.gather(*(cancel(i) for i in range(RAN, half)))
    if kill is not None:
        await kill()
    await asyncio.gather(*(cancel(i) for i in range(half, len(jobs))))
    for _ in range(RAN):
        await run_once(h, process, slot)


@pytest.mark.parametrize("flavour", ["threads", "tasks"])
def test_200_waits_at_once_open_one_stream_and_each_gets_its_own_outcome(db_uri: str, flavour: str) -> None:
    async def scenario(h: Harness) -> None:
        process, slot = await h.worker("w1")
        if flavour == "threads":
            with sync_producer(h) as (rec, commands), ThreadPoolExecutor(N) as pool:
                jobs = rec.enqueue_many([Record(h.db_uri, n=i) for i in range(N)])
                waits = [asyncio.wrap_future(pool.submit(outcome_of, lambda job=job: job.wait(120))) for job in jobs]
                await wait_for_async(lambda: asyncio.sleep(0, first_looks(commands) >= N), timeout_s=60,
                                     message="every wait to read its job")
                await end_them_all(h, process, slot, jobs)
                outcomes = await asyncio.gather(*waits)
                assert streams_opened(commands) == 1
        else:
            async with async_producer(h) as (arec, commands):
                ajobs = await arec.enqueue_many([Record(h.db_uri, n=i) for i in range(N)])
                atasks = [asyncio.create_task(outcome_of_async(job.wait(timeout=120))) for job in ajobs]
                await wait_for_async(lambda: asyncio.sleep(0, first_looks(commands) >= N), timeout_s=60,
                                     message="every wait to read its job")
                jobs = list(ajobs)
                await end_them_all(h, process, slot, jobs)
                outcomes = await asyncio.gather(*atasks)
                assert streams_opened(commands) == 1
        assert outcomes == expected(jobs)

    run(db_uri, scenario)


def test_waits_join_the_open_stream_and_it_closes_once_idle(db_uri: str) -> None:
    from recruiter.producer.shared_stream import Status

    async def scenario(h: Harness) -> None:
        process, slot = await h.worker("w1")
        async with async_producer(h) as (rec, commands):
            hub = rec.waits
            hub.idle_close_s = 60.0  # until the end: successive waits share it whatever the machine's speed
            jobs = await rec.enqueue_many([Record(h.db_uri, n=i) for i in range(3)])
            first = asyncio.create_task(jobs[0].wait(timeout=30))
            await wait_for_async(lambda: asyncio.sleep(0, hub.fanout.status is Status.OPEN), message="the stream")
            second = asyncio.create_task(jobs[1].wait(timeout=30))
            await wait_for_async(lambda: asyncio.sleep(0, len(hub.fanout.watches) == 2), message="the second wait")
            await run_once(h, process, slot)
            await run_once(h, process, slot)
            assert (await first, await second) == (0, 1)
            assert not hub.fanout.watches
            third = asyncio.create_task(jobs[2].wait(timeout=30))  # after the others ended: the same stream
            await wait_for_async(lambda: asyncio.sleep(0, len(hub.fanout.watches) == 1), message="the third wait")
            await run_once(h, process, slot)
            assert await third == 2
            assert streams_opened(commands) == 1

            # No wait for idle_close_s: the stream is closed (killCursors), and the next wait opens another.
            assert commands.named("killCursors", "archived") == []
            hub.idle_close_s = 0.2
            await wait_for_async(lambda: asyncio.sleep(0, commands.named("killCursors", "archived")),
                                 message="the idle stream to close")
            assert hub.fanout.status is Status.DOWN
            again = await rec.enqueue(Record(h.db_uri, n=3))
            waiting = asyncio.create_task(again.wait(timeout=30))
            await wait_for_async(lambda: asyncio.sleep(0, hub.fanout.status is Status.OPEN), message="a new stream")
            await run_once(h, process, slot)
            assert await waiting == 3
            assert streams_opened(commands) == 2

    run(db_uri, scenario)


def test_a_sync_producers_stream_closes_once_idle_and_with_the_producer(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        process, slot = await h.worker("w1")
        commands = Commands()
        rec = Recruiter.connect(h.db_uri, clock=h.clock, event_listeners=[commands])
        try:
            rec.waits.idle_close_s = 0.2
            job = rec.enqueue(Record(h.db_uri, n=1))
            waiting = asyncio.create_task(asyncio.to_thread(job.wait, 30))
            await wait_for_async(lambda: asyncio.sleep(0, first_looks(commands) >= 1), message="the wait")
            await run_once(h, process, slot)
            assert await waiting == 1
            await wait_for_async(lambda: asyncio.sleep(0, commands.named("killCursors", "archived")),
                                 message="the idle stream to close")
            rec.waits.idle_close_s = 60.0
            other = rec.enqueue(Record(h.db_uri, n=2))
            waiting = asyncio.create_task(asyncio.to_thread(other.wait, 30))
            await wait_for_async(lambda: asyncio.sleep(0, first_looks(commands) >= 2), message="the second wait")
            await run_once(h, process, slot)
            assert await waiting == 2
            assert streams_opened(commands) == 2
        finally:
            await asyncio.to_thread(rec.close)  # ends the reader and its stream, though idle_close_s is far
        assert len(commands.named("killCursors", "archived")) == 2

    run(db_uri, scenario)


def test_an_event_the_stream_never_delivers_delays_a_wait_but_never_hangs_it(db_uri: str,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from recruiter.producer.shared_stream import Fanout, Status

    monkeypatch.setattr("recruiter.producer.waiting.SAFETY_READ_S", 0.5)
    monkeypatch.setattr(Fanout, "dispatch", lambda self, job_id: 0)  # every event lost

    async def scenario(h: Harness) -> None:
        process, slot = await h.worker("w1")
        async with async_producer(h) as (rec, commands):
            job = await rec.enqueue(Record(h.db_uri, n=4))
            waiting = asyncio.create_task(job.wait(timeout=30))
            await wait_for_async(lambda: asyncio.sleep(0, rec.waits.fanout.status is Status.OPEN), message="the stream")
            await run_once(h, process, slot)
            assert await waiting == 4  # found by a read of its own job, the stream open all along
            assert rec.waits.fanout.status is Status.OPEN
            assert streams_opened(commands) == 1

    run(db_uri, scenario)


@pytest.mark.parametrize("flavour", ["threads", "tasks"])
def test_a_stream_killed_under_the_waits_loses_no_wake_up(db_uri: str, flavour: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # No safety read within the test: only the stream, or a read when it is opened again, wakes a wait.
    monkeypatch.setattr("recruiter.producer.waiting.SAFETY_READ_S", 600.0)
    n = 20

    async def scenario(h: Harness) -> None:
        process, slot = await h.worker("w1")
        commands = StreamCursors()

        seen = [0]  # streams opened before the last kill

        async def kill() -> None:
            # The stream opened since the last kill (it reopens on its own). Its id is taken before the
            # kill: in threads the stream may fail and reopen, adding a new id, before this coroutine runs on.
            await wait_for_async(lambda: asyncio.sleep(0, len(commands.cursor_ids) > seen[0]),
                                 message="a stream open again")
            seen[0] = len(commands.cursor_ids)
            target = commands.cursor_ids[-1:]
            killed = await h.db.command("killCursors", "archived", cursors=target)
            assert killed["cursorsKilled"] == target

        if flavour == "threads":
            rec = Recruiter.connect(h.db_uri, clock=h.clock, event_listeners=[commands])
            try:
                with ThreadPoolExecutor(n) as pool:
                    jobs = rec.enqueue_many([Record(h.db_uri, n=i) for i in range(n)])
                    waits = [asyncio.wrap_future(pool.submit(outcome_of, lambda job=job: job.wait(60))) for job in jobs]
                    await wait_for_async(lambda: asyncio.sleep(0, first_looks(commands) >= n), message="the waits")
                    await kill()
                    await end_them_all(h, process, slot, jobs, kill)
                    outcomes = await asyncio.gather(*waits)
            finally:
                rec.close()
        else:
            async with await AsyncRecruiter.connect(h.db_uri, clock=h.clock, event_listeners=[commands]) as arec:
                ajobs = await arec.enqueue_many([Record(h.db_uri, n=i) for i in range(n)])
                atasks = [asyncio.create_task(outcome_of_async(job.wait(timeout=60))) for job in ajobs]
                await wait_for_async(lambda: asyncio.sleep(0, first_looks(commands) >= n), message="the waits")
                await kill()
                jobs = list(ajobs)
                await end_them_all(h, process, slot, jobs, kill)
                outcomes = await asyncio.gather(*atasks)
        assert outcomes == [("result", i) if i < RAN else ("failed", job, f"no {i}") for i, job in enumerate(jobs)]

    run(db_uri, scenario)
