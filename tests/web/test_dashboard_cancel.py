"""The dashboard's cancel of a job running in a thread says what really happened, and the job's
page says whether it has stopped (its ``halt``), against a real server."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from bson import ObjectId
from starlette.testclient import TestClient

from recruiter.domain.job import JobOptions, build_job_document
from recruiter.store import ensure_indexes_sync, parse_target, sync_client
from recruiter.web import Settings, create_app
from tests.workables import Record


@pytest.fixture
def web(db_uri: str) -> Iterator[TestClient]:
    target = parse_target(db_uri)
    client = sync_client(target, app_name="test-dashboard")
    ensure_indexes_sync(client[target.database])
    with TestClient(create_app(client[target.database], Settings()), base_url="http://127.0.0.1") as c:
        yield c
    client.close()


def running_in_a_thread(db: Any, db_uri: str, now: datetime) -> ObjectId:
    """A job locked by worker w1, whose beat shows it running in a thread."""
    job = dict(build_job_document(Record(db_uri, n=1), JobOptions(group="mail"), now))
    token, session = ObjectId(), ObjectId()
    job.update(locked=True, locked_by="w1", locked_at=now, lock_token=token, status="assigned", attempts=1)
    db.scheduled.insert_one(job)
    db.roster.insert_one({"_id": "w1", "session": session, "available": False, "assigned_to": {"w1": job["_id"]},
                          "job": None, "work_on": ["mail"]})
    db.heartbeats.insert_one({
        "_id": ObjectId(), "kind": "process", "ids": ["w1"], "last_seen_at": now, "fresh_until": now,
        "slots": {"w1": {"id": "w1", "session": session, "working": True, "working_on": job["_id"],
                         "working_token": token, "working_since": now, "working_in_thread": True}}})
    return job["_id"]


def test_cancelling_a_job_running_in_a_thread_says_it_runs_on_and_its_page_says_when_it_stopped(
        web: TestClient, db: Any, db_uri: str) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    job_id = running_in_a_thread(db, db_uri, now)
    page = web.get(f"/jobs/{job_id}")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf, "no CSRF field on the job page"
    response = web.post("/actions/cancel", data={"id": str(job_id), "back": f"/jobs/{job_id}",
                                                 "csrf": csrf.group(1)}, follow_redirects=False)
    assert response.status_code == 303, response.text[:300]
    (audited,) = db.audit.find({"action": "cancel"})
    assert "cancelled, still running in a thread on worker w1 until it returns" in audited["outcome"]
    assert "its slot is held until then" in audited["outcome"]
    assert db.roster.find_one({"_id": "w1"})["halting"]["job"] == job_id

    shown = web.get(f"/jobs/{job_id}").text
    assert "still running in a thread on worker w1 until it returns (its slot is held until then)" in shown
    db.archived.update_one({"_id": job_id}, {"$set": {"halt.ended_at": now}})  # as its worker reports it
    shown = web.get(f"/jobs/{job_id}").text
    assert f"stopped at {now:%Y-%m-%d %H:%M:%S} on worker w1 (in its thread)" in shown
