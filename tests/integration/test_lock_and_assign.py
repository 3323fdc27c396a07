"""A fenced round sends its locks and its assignment as one command (MongoDB's ``bulkWrite``,
recruiter.store.together), inside its transaction; when a lock or an assignment does not land,
the transaction aborts and the same round is written again one statement at a time, as
before, which hands out what it can and rolls back the rest."""

from __future__ import annotations

from typing import Any

import pytest

from recruiter.processes.leadership import LostLease
from recruiter.processes.rounds import TOGETHER_MAX_JOBS
from tests.integration.test_processes_inproc import Harness, run
from tests.workables import Record


def _bulk_writes(h: Harness) -> list[dict[str, Any]]:
    return [cmd for name, _, cmd in h.commands.events if name == "bulkWrite"]


def _assignments(h: Harness) -> list[dict[str, Any]]:
    """The roster updates that assign (the registrations' marks are cleared by updates too)."""
    return [cmd for cmd in h.commands.named("update", "roster") if "_pick" in str(cmd["updates"])]


def test_a_fenced_round_locks_and_assigns_with_one_command(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        jobs = [await Record(h.db_uri, n=i).as_job_of(h.producer).enqueue() for i in range(2)]
        for w in ("w0", "w1"):
            await h.worker(w)
        h.commands.clear()
        report = await h.round()
        assert report.assigned == 2
        (bulk,) = _bulk_writes(h)
        # The lease's fence, the locks, the assignment.
        assert sorted(ns["ns"].split(".", 1)[1] for ns in bulk["nsInfo"]) == ["metadata", "roster", "scheduled"]
        assert h.commands.named("update", "scheduled") == []
        assert _assignments(h) == []
        for job_id in jobs:
            job = await h.job(job_id)
            assert job is not None
            assert job["locked"] is True
            entry = await h.roster(job["locked_by"])
            assert entry is not None
            assert entry["assigned_to"] == {job["locked_by"]: job_id}
            assert entry["job"]["lock_token"] == job["lock_token"]  # the copy is the job as locked
            assert entry["job"]["attempts"] == job["attempts"] == 1

    run(db_uri, scenario)


def test_a_lock_that_does_not_land_aborts_the_command_and_the_round_is_written_again(db_uri: str) -> None:
    """A job changed between the round's read and its lock: the one command would hand out a job it
    did not lock, so its transaction aborts, and the round is written again statement by statement."""
    async def scenario(h: Harness) -> None:
        first = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        changed = await Record(h.db_uri, n=2).as_job_of(h.producer).enqueue()
        for w in ("w0", "w1"):
            await h.worker(w)
        plan = h.recruiter.plan

        async def then_changed() -> Any:
            read = await plan()
            await h.db.scheduled.update_one({"_id": changed}, {"$set": {"attempts": 5}})
            return read

        h.recruiter.plan = then_changed  # type: ignore[method-assign]
        h.commands.clear()
        report = await h.round()
        assert len(_bulk_writes(h)) == 1
        assert len(h.commands.named("update", "scheduled")) >= 1  # written again, one statement at a time
        assert report.assigned == 1
        assert (await h.job(first))["locked"] is True
        kept = await h.job(changed)
        assert kept is not None
        assert kept["locked"] is False  # never handed out
        assert kept["attempts"] == 5
        entries = [await h.roster(w) for w in ("w0", "w1")]
        assert sorted(bool(e and e.get("assigned_to")) for e in entries) == [False, True]
        assert [e["assigned_to"] for e in entries if e and e.get("assigned_to")] in (
            [{"w0": first}], [{"w1": first}])

        h.recruiter.plan = plan  # type: ignore[method-assign]
        h.commands.clear()
        await Record(h.db_uri, n=3).as_job_of(h.producer).enqueue()
        assert (await h.round()).assigned == 1
        assert len(_bulk_writes(h)) == 1  # the next round sends one command again

    run(db_uri, scenario)


def test_where_the_server_has_no_such_command_the_round_sends_each_statement(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        await h.worker("w0")
        h.recruiter.writes.together.supported = False  # as after the driver said "8.0+ only"
        h.commands.clear()
        assert (await h.round()).assigned == 1
        assert _bulk_writes(h) == []
        assert len(h.commands.named("update", "scheduled")) == 1
        assert len(_assignments(h)) == 1

    run(db_uri, scenario)


def test_the_fence_rides_in_the_same_command_and_a_lost_lease_writes_nothing(db_uri: str) -> None:
    """The round's transaction sends its fence as the first operation of that one command: a
    round that hands out jobs and applies nothing else writes in two round trips, the command and
    the commit. A lease someone else holds since makes the fence match nothing: the transaction
    aborts, and no lock and no assignment is left."""
    async def scenario(h: Harness) -> None:
        for w in ("w0", "w1"):
            await h.worker(w)
        await h.round()  # the registrations' marks are cleared by this round
        await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        assert (await h.round()).assigned == 1  # the fairness cursor is written the first time
        await Record(h.db_uri, n=2).as_job_of(h.producer).enqueue()
        h.commands.clear()
        assert (await h.recruiter.fenced_round()).assigned == 1  # (h.round() would acquire the lease first)
        (bulk,) = _bulk_writes(h)
        assert bulk["nsInfo"][bulk["ops"][0]["update"]]["ns"].endswith(".metadata")  # the fence, first
        writes = [name for name, _, _ in h.commands.events
                  if name in ("insert", "update", "delete", "bulkWrite", "commitTransaction")]
        assert writes == ["bulkWrite", "commitTransaction"]

        await h.worker("w2")
        await h.round()  # its registration mark
        second = await Record(h.db_uri, n=3).as_job_of(h.producer).enqueue()
        await h.db.metadata.update_one({"_id": "recruiter"}, {"$set": {"owner": "someone-else"}})
        h.commands.clear()
        with pytest.raises(LostLease):
            await h.recruiter.fenced_round()  # (its lease, as it believes, is not due for renewal)
        assert len(_bulk_writes(h)) == 1  # the fence travelled with the lock and the assignment
        job = await h.job(second)
        assert job is not None
        assert job["locked"] is False
        assert await h.db.roster.count_documents({"assigned_to": {"$exists": True}}) == 2  # the first two jobs' only

    run(db_uri, scenario)


def test_a_round_of_many_jobs_sends_its_statements_apart_and_its_fence_before_its_commit(db_uri: str) -> None:
    """Past TOGETHER_MAX_JOBS, one round trip less is nothing per job: the statements go apart, and
    the fence, which no combined command carried, is written before the commit."""
    async def scenario(h: Harness) -> None:
        count = TOGETHER_MAX_JOBS + 2
        for i in range(count):
            await h.worker(f"w{i}")
        await h.round()  # the registrations' marks
        await h.producer.enqueue_many([Record(h.db_uri, n=i) for i in range(count)])
        h.commands.clear()
        assert (await h.recruiter.fenced_round()).assigned == count
        assert _bulk_writes(h) == []
        writes = [(name, coll) for name, coll, _ in h.commands.events if name in ("update", "commitTransaction")]
        assert ("update", "metadata") in writes
        assert writes[-2:] == [("update", "metadata"), ("commitTransaction", 1)]  # the fence, then the commit

    run(db_uri, scenario)
