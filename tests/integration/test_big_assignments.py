"""Assignments of big jobs, on the real server: a reference instead of the copy, read by
the worker; and a round's assignment update bounded whatever the jobs' sizes (issue 9, part 4)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import bson

from recruiter.domain.job import HISTORY_ALLOWANCE_BYTES, JobOptions, build_job_document
from recruiter.processes.recruiter import RecruiterConfig, RecruiterProcess
from recruiter.processes.rounds import MAX_JOB_COPY_BYTES
from recruiter.store.wakeup import NOT_COPIED
from tests.integration.test_processes_inproc import START, Harness, run, take_and_work
from tests.workables import Carry

KIB = 1024
# The largest job document enqueue takes from a server with MongoDB's 16 MiB limit.
MAX_JOB_BYTES = 16 * 1024 * KIB - HISTORY_ALLOWANCE_BYTES


def payload_for(total_bytes: int, ledger_uri: str) -> str:
    """A payload that makes the whole document of ``Carry(ledger_uri, payload)`` ``total_bytes`` long."""
    base = len(bson.encode(build_job_document(Carry(ledger_uri, ""), JobOptions(), START)))
    return "x" * (total_bytes - base)


def test_a_job_too_big_to_copy_is_assigned_by_reference_and_read_by_its_worker(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id = await Carry(h.db_uri, "x" * (MAX_JOB_COPY_BYTES + KIB)).as_job_of(h.producer).enqueue()
        process, slot = await h.worker("w1")
        assert (await h.round()).assigned == 1
        entry = await h.roster("w1")
        job = await h.job(job_id)
        assert entry is not None
        assert job is not None
        assert entry["job"] == {"_id": job_id, "lock_token": job["lock_token"], NOT_COPIED: True}

        h.commands.clear()
        assert await take_and_work(process, slot) == job_id
        reads = h.commands.named("find", "scheduled")
        assert len(reads) == 1, "one read, by _id"
        assert reads[0]["filter"] == {"_id": {"$eq": job_id}}, "one read, by _id (compared as a value)"
        assert [e["size"] for e in await h.ledger(job=str(job_id))] == [MAX_JOB_COPY_BYTES + KIB]
        assert (await h.round()).applied == 1
        assert (await h.archived(job_id))["why"] == "done"

    run(db_uri, scenario)


def test_a_round_of_many_jobs_just_under_the_copy_limit_is_assigned_in_one_bounded_update(db_uri: str) -> None:
    """300 jobs of 63 KiB would make an assignment update of about 19 MiB, over the
    16 MiB command limit, if every one were copied."""
    count = 300

    async def scenario(h: Harness) -> None:
        ids = await h.producer.enqueue_many(Carry(h.db_uri, "x" * (MAX_JOB_COPY_BYTES - KIB)) for _ in range(count))
        await h.db.roster.insert_many([{"_id": f"w{i:03d}", "work_on": ["*"], "available": True,
                                        "available_since": START, "last_seen_at": START} for i in range(count)])
        await h.db.heartbeats.insert_many([{"_id": f"w{i:03d}", "last_seen_at": START,  # alive (recruiter.liveness)
                                            "fresh_until": START + timedelta(hours=1)} for i in range(count)])
        recruiter = RecruiterProcess(h.db, h.clock, RecruiterConfig(round_size=count), owner="wide")
        assert await recruiter.lease.acquire()
        h.commands.clear()
        assert (await recruiter.fenced_round()).assigned == count
        assert len(h.commands.updates("roster")) == 1, "one assignment update"
        entries: list[dict[str, Any]] = await h.db.roster.find().to_list()
        assert {e["assigned_to"][e["_id"]] for e in entries} == set(ids)
        copied = [e for e in entries if not e["job"].get(NOT_COPIED)]
        assert 0 < len(copied) < count
        for e in copied:
            assert e["job"]["_id"] == e["assigned_to"][e["_id"]]
            assert e["job"]["locked_by"] == e["_id"]

    run(db_uri, scenario)


def test_a_job_of_the_largest_size_enqueue_takes_is_locked_run_and_archived(db_uri: str) -> None:
    """A job of 16 MiB less 600 bytes used to be taken, run, and then its archived copy
    (the job with its execution) was too big: every round failed on it. The producer
    now keeps room for the history (HISTORY_ALLOWANCE_BYTES); a job of the largest size
    it takes goes through the whole cycle."""

    async def scenario(h: Harness) -> None:
        job_id = await Carry(h.db_uri, payload_for(MAX_JOB_BYTES, h.db_uri)).as_job_of(h.producer).enqueue()
        assert len(bson.encode(await h.job(job_id))) == MAX_JOB_BYTES
        process, slot = await h.worker("w1")
        assert (await h.round()).assigned == 1
        assert await take_and_work(process, slot) == job_id
        assert (await h.round()).applied == 1
        archived = await h.archived(job_id)
        assert archived is not None
        assert archived["why"] == "done"
        assert len(archived["executions"]) == 1

    run(db_uri, scenario)
