"""``resubmit`` on the real server, in each state of a job, and against the round's timing
(the harness of ``test_processes_inproc``: rounds and workers driven step by step)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from bson import ObjectId
from pymongo import MongoClient
from pymongo.errors import PyMongoError

from recruiter import JobNotFound, Recruiter, ResubmitRefused
from recruiter.domain.resubmit import AFTER_ATTEMPT, RESCHEDULED
from recruiter.domain.retry import RetryManyTimes
from recruiter.processes.leadership import no_fault
from recruiter.store import strict
from tests.integration.test_processes_inproc import Harness, run, take_and_work
from tests.workables import AlwaysFails, AsyncRecord, Record


def test_a_waiting_job_is_rescheduled(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id = await Record(h.db_uri).as_job_of(h.producer).schedule_in(hours=2).enqueue()
        result = await h.producer.resubmit(job_id)
        assert (result.state, result.at) == (RESCHEDULED, h.clock.now())
        assert (await h.producer.job(job_id)).state == "queued"
        later = h.clock.now() + timedelta(minutes=10)
        assert (await h.producer.resubmit(str(job_id), at=later)).at == later
        job = await h.job(job_id)
        assert (job["scheduled_at"], job["status"], job["attempts"]) == (later, "queued", 0)
        assert "resubmit" not in job

    run(db_uri, scenario)


def test_a_running_job_resubmitted_twice_runs_once_more_after_its_attempt(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id = await AsyncRecord(h.db_uri, n=1, sleep_s=0.3).as_job_of(h.producer).enqueue()
        process, slot = await h.worker("w1")
        await h.round()
        assert await process.poll(slot) == job_id
        working = asyncio.create_task(process.work(slot, job_id))
        for _ in range(2):
            result = await h.producer.resubmit(job_id)
            assert result.state == AFTER_ATTEMPT
        assert not working.done()  # not halted
        await asyncio.wait_for(working, timeout=10)
        await h.round()
        job = await h.job(job_id)
        assert (job["status"], job["resubmits"], job["scheduled_at"]) == ("queued", 1, h.clock.now())
        assert await h.archived(job_id) is None
        await h.round()
        assert await take_and_work(process, slot) == job_id
        await h.round()
        archived = await h.archived(job_id)
        assert (archived["why"], archived["attempts"], archived["resubmits"]) == ("done", 2, 1)
        runs = await h.ledger(event="start")
        ends = await h.ledger(event="end")
        assert len(runs) == 2
        assert runs[1]["at"] >= ends[0]["at"]
        assert await h.db.scheduled.count_documents({}) == 0

    run(db_uri, scenario)


def test_a_resubmit_after_the_outcome_is_recorded_is_not_lost(db_uri: str) -> None:
    """The round applies outcomes from the job as it remembered it; the resubmit came later."""
    async def scenario(h: Harness) -> None:
        done = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        failing = await AlwaysFails(h.db_uri).as_job_of(h.producer).retry_with(
            RetryManyTimes(times=3, wait=timedelta(hours=1))).enqueue()
        w1, s1 = await h.worker("w1")
        w2, s2 = await h.worker("w2")
        assert (await h.round()).assigned == 2
        await take_and_work(w1, s1)
        await take_and_work(w2, s2)  # both outcomes recorded, not applied
        later = h.clock.now() + timedelta(minutes=3)
        for job_id in (done, failing):
            assert (await h.producer.resubmit(job_id, at=later)).state == AFTER_ATTEMPT
        await h.round()
        assert await h.db.archived.count_documents({}) == 0  # the copy written then taken back
        for job_id in (done, failing):
            job = await h.job(job_id)
            assert (job["status"], job["scheduled_at"], job["resubmits"], job["locked"]) == ("queued", later, 1, False)
            assert len(job["executions"]) == 1

    run(db_uri, scenario)


def test_a_failed_attempt_that_would_be_archived_runs_once_more(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id = await AlwaysFails(h.db_uri).as_job_of(h.producer).enqueue()  # DoNotDoItAgain
        process, slot = await h.worker("w1")
        await h.round()
        assert await process.poll(slot) == job_id
        await h.producer.resubmit(job_id)
        await process.work(slot, job_id)
        await h.round()
        assert (await h.job(job_id))["resubmits"] == 1
        await h.round()
        await take_and_work(process, slot)
        await h.round()
        archived = await h.archived(job_id)
        assert (archived["why"], archived["attempts"]) == ("not-scheduled-by-retry-policy", 2)
        assert [e["outcome"] for e in archived["executions"]] == ["failed", "failed"]

    run(db_uri, scenario)


def test_an_archived_job_is_refused_and_an_unknown_one_not_found(db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        job_id = Record(db_uri).as_job_of(rec).enqueue()
        assert rec.cancel(job_id).state == "cancelled"
        with pytest.raises(ResubmitRefused) as info:
            rec.resubmit(job_id)
        message = str(info.value)
        assert "\n" not in message
        assert "archived (cancelled)" in message
        assert f"recruiter jobs retry {job_id}" in message
        with pytest.raises(JobNotFound):
            rec.resubmit(ObjectId())
        with pytest.raises(ValueError, match="datetime"):
            rec.resubmit(job_id, at="tomorrow")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="not a job id"):
            rec.resubmit("nope")
        assert rec.db.archived.find_one({"_id": job_id})["why"] == "cancelled"
        assert rec.db.scheduled.count_documents({}) == 0


def test_the_sync_producer_resubmits_a_waiting_job(db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        job = Record(db_uri).as_job_of(rec).schedule_in(hours=1).enqueue()
        result = rec.resubmit(job)
        assert result.state == RESCHEDULED
        assert "rescheduled" in result.describe()
        assert job.refresh().state == "queued"


def test_a_resubmit_committed_inside_the_rounds_transaction_is_not_lost(db_uri: str) -> None:
    """The resubmit commits after the round's transaction began and before its delete: the
    delete conflicts (the round is run again) or sees the flag; either way the job runs again."""
    async def scenario(h: Harness) -> None:
        job_id = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        process, slot = await h.worker("w1")
        await h.round()
        await take_and_work(process, slot)
        other: MongoClient[Any] = MongoClient(h.db_uri, tz_aware=True, timeoutMS=10_000,
                                              event_listeners=strict.listeners())

        def resubmit_now(point: str) -> None:
            if point == "archive.between_insert_and_delete":
                h.recruiter.fault = no_fault
                Recruiter(other, h.db.name, clock=h.clock).resubmit(job_id)

        h.recruiter.fault = resubmit_now
        conflict: PyMongoError | None = None
        try:
            try:
                await h.round()
            except PyMongoError as exc:
                conflict = exc
            print("round met a write conflict:", conflict is not None)
            if conflict is not None:  # the delete met the resubmit: nothing was written, run again
                assert conflict.has_error_label("TransientTransactionError")
                assert await h.archived(job_id) is None
                await h.round()
        finally:
            other.close()
        assert await h.archived(job_id) is None
        job = await h.job(job_id)
        assert (job["status"], job["resubmits"], job["locked"]) == ("queued", 1, False)

    run(db_uri, scenario)
