"""Results on the real server: a 200 KiB result reaches ``wait()``; one over the worker's limit,
or one BSON cannot hold, is archived ``done`` with ``result_dropped`` and every way of waiting
raises :class:`~recruiter.ResultDropped`, never a silent None; a job's SystemExit or
KeyboardInterrupt ends its attempt, not the worker. The recruiter and the worker are driven
step by step (``test_processes_inproc``'s harness)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog

from recruiter import JobHandle, ResultDropped
from recruiter.domain.outcome import Execution, Outcome
from recruiter.domain.retry import Archive
from recruiter.processes.worker.config import WorkerConfig
from recruiter.processes.worker.runtime import WorkerProcess
from recruiter.store import roster
from recruiter.store.roster import OutcomeRefused
from tests.hostile_jobs import Hostile, HostileAsync, ReturnsText
from tests.integration.test_job_handles import async_producer, run_once, sync_producer
from tests.integration.test_processes_inproc import Harness, run

KiB = 1024


def test_a_200_kib_result_reaches_wait_sync_and_async(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        process, slot = await h.worker("w1")
        with sync_producer(h) as (rec, _):
            job = rec.enqueue(ReturnsText(200 * KiB))
            assert isinstance(job, JobHandle)
            waiting = asyncio.create_task(asyncio.to_thread(job.wait, 60))
            await run_once(h, process, slot)
            assert await waiting == "r" * (200 * KiB)
            archived = await h.archived(job.id)
            assert archived is not None
            assert (archived["why"], len(archived["result"])) == ("done", 200 * KiB)
            assert "result_dropped" not in archived
        async with async_producer(h) as (arec, _):
            assert await (await arec.job(job.id)).wait(timeout=30) == "r" * (200 * KiB)

    run(db_uri, scenario)


def test_a_result_over_the_limit_is_archived_dropped_and_wait_raises_it(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        process, slot = await h.worker("w1")
        with sync_producer(h) as (rec, _):
            big = rec.enqueue(ReturnsText(1024 * KiB + 1))
            unencodable = rec.enqueue(Hostile("set"))
            fine = rec.enqueue(ReturnsText(3))
            waiting = asyncio.create_task(asyncio.to_thread(big.wait, 60))
            for _ in range(3):
                await run_once(h, process, slot)
            with pytest.raises(ResultDropped, match=(
                    rf"^job {big} ended done but its result was not kept \(1048590 bytes\): the result is "
                    r"1048590 bytes of BSON, over the 1048576-byte limit$")):
                await waiting
            archived = await h.archived(big.id)
            assert archived is not None
            assert archived["why"] == "done"
            assert "result" not in archived
            assert archived["result_dropped"] == {
                "reason": "the result is 1048590 bytes of BSON, over the 1048576-byte limit", "size_bytes": 1048590}
            assert (await h.archived(unencodable.id) or {})["result_dropped"]["size_bytes"] is None

            # Every way of waiting says so.
            with pytest.raises(ResultDropped, match="cannot encode object"):
                rec.job(unencodable.id).wait(timeout=10)
            handle = rec.job(big.id)
            with pytest.raises(ResultDropped):
                _ = handle.result
            results = rec.wait_all([rec.job(j.id) for j in (big, unencodable, fine)], timeout=10,
                                   return_exceptions=True)
            assert [type(r) for r in results[:2]] == [ResultDropped, ResultDropped]
            assert results[2] == "rrr"
            with pytest.raises(ResultDropped):
                rec.wait_all([rec.job(fine.id), rec.job(big.id)], timeout=10)
            for done in rec.as_completed([rec.job(big.id)], timeout=10):
                with pytest.raises(ResultDropped):
                    done.wait()
        async with async_producer(h) as (arec, _):
            with pytest.raises(ResultDropped) as raised:
                await (await arec.job(big.id)).wait(timeout=10)
            assert raised.value.size_bytes == 1048590
            results = await arec.wait_all([await arec.job(big.id)], timeout=10, return_exceptions=True)
            assert isinstance(results[0], ResultDropped)

    run(db_uri, scenario)


def test_the_worker_limit_is_its_option(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        config = WorkerConfig(worker_id="small", max_result_bytes=10 * KiB)
        process = WorkerProcess(h.db, h.clock, config, heartbeat_db=h.sync_db, exit_now=lambda status: None)
        (slot,) = process.slots
        await process.register(slot)
        with sync_producer(h) as (rec, _):
            job = rec.enqueue(ReturnsText(20 * KiB))
            await run_once(h, process, slot)
            with pytest.raises(ResultDropped, match="over the 10240-byte limit"):
                rec.job(job.id).wait(timeout=10)
        with pytest.raises(ValueError, match="max result size must be from 1 byte to 8 MiB"):
            WorkerConfig(max_result_bytes=9 * 1024 * KiB)

    run(db_uri, scenario)


@pytest.mark.parametrize("what", ["sys-exit", "keyboard-interrupt", "self-referencing", "surrogate-message",
                                  "str-raises", "surrogate-logs", "cancelled"])
@pytest.mark.parametrize("kind", [Hostile, HostileAsync], ids=["thread", "asyncio"])
def test_a_hostile_job_ends_its_attempt_and_the_worker_goes_on(db_uri: str, what: str, kind: Any) -> None:
    async def scenario(h: Harness) -> None:
        process, slot = await h.worker("w1")
        with sync_producer(h) as (rec, _):
            hostile = rec.enqueue(kind(what))
            after = rec.enqueue(ReturnsText(2))
            await run_once(h, process, slot)
            await run_once(h, process, slot)
            archived = await h.archived(hostile.id)
            assert archived is not None, "archived, whatever the job handed back"
            assert rec.job(after.id).wait(timeout=10) == "rr", "the worker went on"
            last = archived["last_execution"]
            if archived["why"] == "done":
                assert "result_dropped" in archived or "\\ud800" in last.get("logs", "") + str(archived)
            else:
                assert last["class"]
                assert last["message"] is not None
        assert h.exits == []

    run(db_uri, scenario)


def test_an_outcome_the_store_cannot_write_is_written_again_without_its_details(db_uri: str) -> None:
    """The last safety net: an outcome that slipped past the checks (here a set as its result)
    is refused by the driver; the worker writes it again stripped, and the job is archived
    with its decision, saying why its details were dropped."""
    async def scenario(h: Harness) -> None:
        process, slot = await h.worker("w1")
        with sync_producer(h) as (rec, _):
            job = rec.enqueue(ReturnsText(1))
        await process.heartbeat()
        await h.round()
        assert await process.poll(slot) == job.id
        doc = await h.job(job.id)
        assert doc is not None
        execution = Execution.of(doc, "done", pid=1, hostname="h", started_at=h.clock.now(),
                                 ended_at=h.clock.now(), logs="some logs\n")
        outcome = Outcome(job.id, doc["lock_token"], 1, executed=True, decision=Archive("done"),
                          execution=execution, result={1, 2})
        with pytest.raises(OutcomeRefused, match="InvalidDocument"):
            await roster.record_outcome(h.db.roster, slot.id, slot.session, job.id, outcome.to_document(),
                                        stopping=False, now=h.clock.now())
        await process.record(slot, outcome, structlog.get_logger())
        assert (await h.round()).applied == 1
        archived = await h.archived(job.id)
        assert archived is not None
        assert archived["why"] == "done"
        assert archived["result_dropped"]["reason"].startswith("the outcome could not be written with it: "
                                                               "InvalidDocument")
        assert "logs" not in archived["last_execution"]
        assert "the outcome could not be written" in archived["last_execution"]["message"]

    run(db_uri, scenario)
