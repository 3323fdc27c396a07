"""recruiter.testing.drain: enqueue, run a real recruiter and worker in this process, return the archive."""

from __future__ import annotations

import asyncio
import logging
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from recruiter import Recruiter
from recruiter.retry import RetryManyTimes
from recruiter.store.scheduled import work_left_for
from recruiter.testing import drain, drain_async
from tests.testing_workables import AsyncDoubles, FailsTwice
from tests.workables import Record


def test_drain_runs_what_it_enqueues_and_what_was_waiting(db_uri: str, db: Any) -> None:
    with Recruiter.connect(db_uri) as rec:
        waiting = Record(db_uri, n=7).as_job_of(rec).in_group("other").enqueue()
        later = Record(db_uri, n=8).as_job_of(rec).schedule_in(minutes=30).enqueue()
        # A builder may name any recruiter: drain enqueues it itself.
        retried = FailsTwice("f").as_job_of(rec).retry_with(RetryManyTimes(2, wait=0))
    root = logging.getLogger()
    before = (root.level, list(root.handlers), sys.stdout, sys.stderr)
    drained = drain(db_uri, [Record(db_uri, n=1), AsyncDoubles(4), retried])
    assert (root.level, list(root.handlers), sys.stdout, sys.stderr) == before
    assert drained.whys == ["done", "done", "done"]
    assert drained.results == [1, {"n": 8, "attempt": 1}, "f on " + drained.enqueued[2]["last_execution"]["worker"]
                               + " in generic"]
    assert [e["outcome"] for e in drained.enqueued[2]["executions"]] == ["failed", "failed", "done"]
    assert "printed in attempt 3" in drained.enqueued[2]["last_execution"]["logs"]
    # The job that was already due ran too, and comes after the enqueued ones; the later one did not run.
    assert [d["_id"] for d in drained.jobs[3:]] == [waiting]
    assert db.scheduled.find_one({"_id": later})["attempts"] == 0
    assert db.roster.count_documents({}) == 0, "the worker left the roster"


def test_drain_waits_for_its_own_jobs_due_later_and_times_out_naming_what_is_left(db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        soon = Record(db_uri, n=1).as_job_of(rec).schedule_in(seconds=1)
        drained = drain(db_uri, [soon], timeout_s=30)
        assert drained.whys == ["done"]
        never = Record(db_uri, n=2).as_job_of(rec).schedule_in(minutes=30)
        with pytest.raises(TimeoutError, match="still not archived after 1s"):
            drain(db_uri, [never], timeout_s=1)


def test_drain_async_in_a_group(db_uri: str) -> None:
    async def main() -> None:
        drained = await drain_async(db_uri, [AsyncDoubles(1)], groups=["generic"], concurrency=2)
        assert drained.results == [{"n": 2, "attempt": 1}]
        assert drained.enqueued[0]["last_execution"]["worker"].startswith("drain-")

    asyncio.run(main())


def test_work_left_sees_a_job_locked_between_its_two_reads(db_uri: str, db: Any) -> None:
    """``worker start --burst`` and the drain stop once nothing is left for their workers: no job
    locked by them, none due unlocked. A round that locks a job for them between the two reads
    must not make it look gone (CI, 2026-11-28: a drain stopped with a job just assigned, ran it
    while stopping, and left its outcome unapplied)."""
    with Recruiter.connect(db_uri) as rec:
        job_id = Record(db_uri, n=1).as_job_of(rec).enqueue()

    async def main() -> bool:
        client: AsyncMongoClient[Any] = AsyncMongoClient(db_uri, tz_aware=True)
        try:
            jobs = client.get_default_database().scheduled

            class LockedAfterTheFirstRead:
                """The collection, with a round locking the job for ``w`` just after the first read."""

                def __init__(self) -> None:
                    self.reads = 0

                async def find_one(self, *args: Any, **kwargs: Any) -> Any:
                    found = await jobs.find_one(*args, **kwargs)
                    self.reads += 1
                    if self.reads == 1:
                        await jobs.update_one({"_id": job_id}, {"$set": {"locked": True, "locked_by": "w"}})
                    return found

            return await work_left_for(LockedAfterTheFirstRead(), None, ["w"],  # type: ignore[arg-type]
                                       datetime.now(UTC) + timedelta(seconds=1))
        finally:
            await client.close()

    assert asyncio.run(main()) is True
    assert db.scheduled.find_one({"_id": job_id})["locked_by"] == "w"
