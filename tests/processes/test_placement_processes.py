"""Jobs aimed at one worker, and jobs enqueued in the caller's transaction, with the real
processes (``recruiter start``, ``worker start``, ``cleaner start``).

- ``.on_worker("billing-1")`` jobs run only on the worker started with ``--id billing-1``:
  never on the other workers of their group, nor on ``*`` workers, even while those idle;
  they wait while that worker is absent and run once it starts.
- They are archived ``worker-gone`` when the cleaner removes their worker as dead, not when
  it stops gracefully, and ``worker-deadline`` once their deadline passes.
- A job enqueued in an aborted transaction leaves nothing; one in a committed transaction
  runs; a session of another client is refused in one line, with nothing written.
"""

from __future__ import annotations

import asyncio
import json
import signal
from datetime import timedelta
from typing import Any

import pytest
from pymongo import MongoClient

from recruiter import AsyncRecruiter, JobFailed, JobRefused, Recruiter
from recruiter.store import strict
from tests.conftest import wait_for
from tests.processes.conftest import Processes
from tests.processes.test_cli_errors import run_cli
from tests.workables import Record

AIMED = 4


def registered(db: Any, worker_id: str) -> bool:
    return db.roster.find_one({"_id": worker_id}) is not None


def test_aimed_jobs_run_only_on_their_worker(processes: Processes, db: Any, db_uri: str) -> None:
    processes.recruiter()
    processes.worker("--id", "other", "--group", "billing", "--concurrency", "2")
    processes.worker("--id", "any")  # '*': any group
    with Recruiter.connect(db_uri) as rec:
        aimed = [Record(db_uri, n).as_job_of(rec).in_group("billing").on_worker("billing-1").enqueue()
                 for n in range(AIMED)]
        # Jobs of the same group enqueued after them run on the idle workers, in later rounds...
        for _ in range(3):
            plain = rec.enqueue_many([Record(db_uri, 100 + n).as_job_of(rec).in_group("billing") for n in range(4)])
            rec.wait_all(plain, timeout=60)
        # ...while the aimed ones, due all along, were never given to them.
        for job in aimed:
            doc = db.scheduled.find_one({"_id": job})
            assert doc is not None
            assert (doc["locked"], doc["attempts"], doc["group"]) == (False, 0, "@worker:billing-1")
        assert db.ledger.count_documents({"n": {"$lt": AIMED}}) == 0
        listed = run_cli("jobs", "list", "--group", "@worker:billing-1", "--json", "--target", db_uri)
        assert listed.returncode == 0, listed.stderr
        assert sorted(j["id"] for j in json.loads(listed.stdout)) == sorted(str(j) for j in aimed)

        processes.worker("--id", "billing-1", "--group", "billing", "--concurrency", "2")
        assert rec.wait_all(aimed, timeout=60) == list(range(AIMED))
    for job in aimed:
        archived = db.archived.find_one({"_id": job})
        assert archived["why"] == "done"
        assert archived["last_execution"]["worker"] in ("billing-1-0", "billing-1-1")
        assert archived["on_worker"] == {"worker": "billing-1", "group": "billing"}
    # The job saw the group it was enqueued in.
    assert {e["group"] for e in db.ledger.find({"n": {"$lt": AIMED}})} == {"billing"}
    assert {e["worker"] for e in db.ledger.find({"n": {"$lt": AIMED}})} <= {"billing-1-0", "billing-1-1"}


def test_aimed_jobs_are_archived_when_their_worker_is_removed_or_too_late(
        processes: Processes, db: Any, db_uri: str) -> None:
    processes.recruiter()
    processes.cleaner()
    doomed = processes.worker("--id", "doomed", "--group", "g")
    gentle = processes.worker("--id", "gentle", "--group", "g")
    wait_for(lambda: registered(db, "doomed") and registered(db, "gentle"), message="both workers to register")
    gentle.signal(signal.SIGTERM)  # a graceful stop deregisters: its jobs wait for it
    assert gentle.wait(30) == 0
    doomed.signal(signal.SIGKILL)  # killed: the cleaner removes it as dead
    doomed.wait(10)
    with Recruiter.connect(db_uri) as rec:
        gone = Record(db_uri, 1).as_job_of(rec).in_group("g").on_worker("doomed").enqueue()
        waits = Record(db_uri, 2).as_job_of(rec).in_group("g").on_worker("gentle").enqueue()
        late = Record(db_uri, 3).as_job_of(rec).on_worker("nobody", deadline=timedelta(seconds=1)).enqueue()
        archived = wait_for(lambda: db.archived.find_one({"_id": gone}), timeout_s=30,
                            message="the job of the dead worker to be archived")
        assert archived["why"] == "worker-gone"
        assert "worker doomed was removed by the cleaner" in archived["reason"]
        assert archived["attempts"] == 0
        with pytest.raises(JobFailed) as failed:  # its handle says so too
            gone.wait(timeout=10)
        assert failed.value.why == "worker-gone"
        archived = wait_for(lambda: db.archived.find_one({"_id": late}), timeout_s=30,
                            message="the job past its deadline to be archived")
        assert archived["why"] == "worker-deadline"
        assert "did not start the job before its deadline" in archived["reason"]
        # The gracefully stopped worker's job still waits, and runs when it comes back.
        assert db.scheduled.find_one({"_id": waits})["locked"] is False
        processes.worker("--id", "gentle", "--group", "g")
        assert rec.wait_all([waits], timeout=60) == [2]
    assert db.ledger.count_documents({"n": {"$in": [1, 3]}}) == 0
    cleaner_log = processes.logs()
    assert "worker-gone" in cleaner_log
    assert "worker-deadline" in cleaner_log


def test_enqueue_in_the_callers_transaction(processes: Processes, db: Any, db_uri: str) -> None:
    processes.recruiter()
    processes.worker("--id", "tx")
    with Recruiter.connect(db_uri) as rec:
        # Aborted: nothing is left.
        enqueued: list[object] = []
        with pytest.raises(RuntimeError, match="business write failed"):
            _enqueue_then_fail(rec, db_uri, enqueued)
        assert len(enqueued) == 3
        for job in enqueued:
            assert db.scheduled.find_one({"_id": job}) is None
        assert db.orders.count_documents({}) == 0

        # Committed: invisible until the commit, then it runs.
        with rec.client.start_session() as s, s.start_transaction():
            rec.client.get_default_database().orders.insert_one({"order": 2}, session=s)
            committed = Record(db_uri, 4).as_job_of(rec).enqueue(session=s)
            many = rec.enqueue_many([Record(db_uri, 5)], session=s)
            assert db.scheduled.find_one({"_id": committed}) is None  # not yet: another client's read
        assert rec.wait_all([committed, *many], timeout=60) == [4, 5]
        assert db.orders.count_documents({}) == 1

        # A session of another client: refused in one line, nothing written.
        other: MongoClient[Any] = MongoClient(db_uri, event_listeners=strict.listeners())
        try:
            with other.start_session() as foreign:
                for attempt in (lambda: rec.enqueue(Record(db_uri, 6), session=foreign),
                                lambda: rec.enqueue_many([Record(db_uri, 7)], session=foreign)):
                    with pytest.raises(JobRefused, match="another MongoClient") as refused:
                        attempt()
                    assert "\n" not in str(refused.value)
                    assert "nothing was written" in str(refused.value)
        finally:
            other.close()
    assert db.scheduled.count_documents({}) == 0
    assert db.ledger.count_documents({"n": {"$in": [1, 2, 3, 6, 7]}}) == 0
    asyncio.run(_async_transactions(db, db_uri))


def _enqueue_then_fail(rec: Recruiter, db_uri: str, enqueued: list[object]) -> None:
    """A business write and three jobs in one transaction, which then fails (so it aborts)."""
    with rec.client.start_session() as s, s.start_transaction():
        rec.client.get_default_database().orders.insert_one({"order": 1}, session=s)
        enqueued.append(rec.enqueue(Record(db_uri, 1), session=s))
        enqueued.extend(rec.enqueue_many([Record(db_uri, 2), Record(db_uri, 3)], session=s))
        raise RuntimeError("business write failed")


async def _enqueue_then_fail_async(rec: AsyncRecruiter, db_uri: str, enqueued: list[object]) -> None:
    async with rec.client.start_session() as s, await s.start_transaction():
        enqueued.append(await rec.enqueue(Record(db_uri, 8), session=s))
        raise RuntimeError("abort")


async def _async_transactions(db: Any, db_uri: str) -> None:
    async with await AsyncRecruiter.connect(db_uri) as rec:
        enqueued: list[object] = []
        with pytest.raises(RuntimeError, match="abort"):
            await _enqueue_then_fail_async(rec, db_uri, enqueued)
        assert len(enqueued) == 1
        assert db.scheduled.find_one({"_id": enqueued[0]}) is None
        async with rec.client.start_session() as s, await s.start_transaction():
            kept = await rec.enqueue(Record(db_uri, 9), session=s)
            kept_many = await Record(db_uri, 10).as_job_of(rec).enqueue(session=s)
        assert await rec.wait_all([kept, kept_many], timeout=60) == [9, 10]
        with Recruiter.connect(db_uri) as sync_rec, sync_rec.client.start_session() as sync_session, \
                pytest.raises(JobRefused, match="session"):
            await rec.enqueue(Record(db_uri, 11), session=sync_session)  # type: ignore[arg-type]
    assert db.ledger.count_documents({"n": {"$in": [8, 11]}}) == 0
