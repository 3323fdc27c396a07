"""Retry now and delete (recruiter.store.waiting_actions) on the real server, through the read model:
what each does to each state, that a second one changes nothing and says so, and that neither races a round."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import ObjectId
from click.testing import CliRunner, Result

from recruiter.admin import Admin
from recruiter.cli.main import main
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.domain.waiting_actions import Write, plan_retry_now
from recruiter.store import ensure_indexes_sync
from tests.workables import Record


@pytest.fixture
def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
def admin(db: Any) -> Admin:
    ensure_indexes_sync(db)
    return Admin(db)


def waiting(db: Any, db_uri: str, n: int, now: datetime, **fields: Any) -> ObjectId:
    doc = {**build_job_document(Record(db_uri, n=n), JobOptions(group="mail"), now - timedelta(minutes=5)), **fields}
    db.scheduled.insert_one(doc)
    return doc["_id"]


def backing_off(db: Any, db_uri: str, n: int, now: datetime) -> ObjectId:
    return waiting(db, db_uri, n, now, status="retrying", attempts=1, scheduled_at=now + timedelta(hours=1))


def held(db: Any, db_uri: str, n: int, now: datetime) -> ObjectId:
    return waiting(db, db_uri, n, now, status="assigned", locked=True, locked_by="w1", lock_token=ObjectId(),
                   locked_at=now, lock_epoch=1)


def test_retry_now_makes_a_backing_off_job_due_once(db: Any, db_uri: str, admin: Admin, now: datetime) -> None:
    job = backing_off(db, db_uri, 1, now)
    (first,) = admin.retry_now([job])
    assert first.state == "due-now"
    assert first.changed
    due = db.scheduled.find_one({"_id": job})["scheduled_at"]
    assert due <= admin.now() + timedelta(seconds=1)
    (second,) = admin.retry_now([str(job)])  # the double submit
    assert second.state == "already-due"
    assert not second.changed
    assert "nothing changed" in second.describe()
    assert db.scheduled.find_one({"_id": job})["scheduled_at"] == due
    assert db.scheduled.find_one({"_id": job})["status"] == "retrying"


def test_retry_now_refuses_what_is_not_backing_off(db: Any, db_uri: str, admin: Admin, now: datetime) -> None:
    queued = waiting(db, db_uri, 1, now)
    delayed = waiting(db, db_uri, 2, now, scheduled_at=now + timedelta(hours=1))
    running = held(db, db_uri, 3, now)
    before = list(db.scheduled.find(sort=[("_id", 1)]))
    results = admin.retry_now([queued, delayed, running, ObjectId()])
    assert [r.state for r in results] == ["refused", "refused", "refused", "not-found"]
    assert "it is queued" in results[0].detail
    assert "it is delayed" in results[1].detail
    assert "worker w1 holds it" in results[2].detail
    assert list(db.scheduled.find(sort=[("_id", 1)])) == before


def test_retry_now_does_not_race_a_round(db: Any, db_uri: str, now: datetime) -> None:
    """The update is planned from the job as read; a round that locks it first makes it match nothing."""
    job = backing_off(db, db_uri, 1, now)
    plan = plan_retry_now(db.scheduled.find_one({"_id": job}), now)
    assert isinstance(plan, Write)
    assert plan.update is not None
    db.scheduled.update_one({"_id": job, "locked": False}, {"$set": {"locked": True, "locked_by": "w1",
                                                                      "status": "assigned"}})
    assert db.scheduled.update_one(plan.filter, plan.update).matched_count == 0


def test_delete_archives_a_waiting_job_once(db: Any, db_uri: str, admin: Admin, now: datetime) -> None:
    jobs = [waiting(db, db_uri, 1, now), waiting(db, db_uri, 2, now, scheduled_at=now + timedelta(hours=1)),
            backing_off(db, db_uri, 3, now)]
    results = admin.delete(jobs, reason="duplicate order")
    assert [r.state for r in results] == ["deleted"] * 3
    assert db.scheduled.count_documents({}) == 0
    archived = {d["_id"]: d for d in db.archived.find()}
    assert {archived[j]["why"] for j in jobs} == {"deleted"}
    assert {archived[j]["delete_reason"] for j in jobs} == {"duplicate order"}
    assert archived[jobs[2]]["attempts"] == 1  # its failed attempt stays counted
    again = admin.delete(jobs)
    assert [r.describe() for r in again] == [f"{j}: already archived (deleted): nothing changed" for j in jobs]
    assert db.archived.count_documents({}) == 3


def test_delete_refuses_a_job_a_worker_holds(db: Any, db_uri: str, admin: Admin, now: datetime) -> None:
    running = held(db, db_uri, 1, now)
    before = db.scheduled.find_one({"_id": running})
    (result,) = admin.delete([running])
    assert result.state == "refused"
    assert "worker w1 holds it" in result.detail
    assert "`cancel` halts a running one" in result.detail
    assert db.scheduled.find_one({"_id": running}) == before
    assert db.archived.count_documents({}) == 0


def cli(*args: str, db_uri: str) -> Result:
    return CliRunner().invoke(main, [*args, "--target", db_uri], catch_exceptions=False)


def test_the_commands_say_what_each_did_and_a_second_run_changes_nothing(db: Any, db_uri: str,
                                                                         now: datetime) -> None:
    ensure_indexes_sync(db)
    backoff, queued, running = backing_off(db, db_uri, 1, now), waiting(db, db_uri, 2, now), held(db, db_uri, 3, now)
    first = cli("jobs", "retry-now", str(backoff), db_uri=db_uri)
    assert (first.exit_code, first.stdout) == (0, f"{backoff}: retrying now (its backoff ended)\n")
    again = cli("jobs", "retry-now", str(backoff), db_uri=db_uri)
    assert again.exit_code == 0
    assert "already due" in again.stdout
    assert "nothing changed" in again.stdout
    refused = cli("jobs", "retry-now", str(queued), db_uri=db_uri)
    assert refused.exit_code == 1
    assert "refused: it is queued" in refused.stdout
    deleted = cli("jobs", "delete", str(queued), str(running), "--reason", "test", db_uri=db_uri)
    assert deleted.exit_code == 1, deleted.stdout
    assert deleted.stdout.splitlines() == [
        f"{queued}: deleted (archived as deleted, it never runs)",
        f"{running}: refused: worker w1 holds it (assigned or running); delete takes only a waiting job "
        "(queued, delayed, retrying): `cancel` halts a running one"]
    twice = cli("jobs", "delete", str(queued), db_uri=db_uri)
    assert (twice.exit_code, twice.stdout) == (0, f"{queued}: already archived (deleted): nothing changed\n")
    bad = cli("jobs", "delete", str(backoff), "nope", db_uri=db_uri)
    assert bad.exit_code == 2
    assert "'nope' is not a job id" in bad.stderr
    assert db.scheduled.find_one({"_id": backoff}) is not None  # one bad id: nothing deleted
