"""The skew rule for snoozes: a previous-release leader applies this release's snooze outcome as a
give-back (the attempt not counted, due at the time asked), and a previous-release worker runs a
snoozed job as the waiting job it is: once, not before its due time, its new fields ignored."""

from __future__ import annotations

import signal
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from recruiter import Recruiter
from tests.conftest import wait_for
from tests.processes.conftest import FAST_RECRUITER, FAST_WORKER, Processes
from tests.processes.test_upgrades import Previous, start_previous
from tests.processes.test_upgrades import previous as previous  # the fixture, built once per session
from tests.snoozing import SnoozesThenDone, runs_of
from tests.workables import Record

pytestmark = [pytest.mark.processes, pytest.mark.timeout(900)]


def test_a_previous_release_applies_a_snooze_and_runs_a_snoozed_job(
        processes: Processes, previous: Previous, db: Any, db_uri: str) -> None:
    # A previous leader applies the snoozes of this release's worker.
    old_leader = start_previous(processes, previous, "recruiter", "start", *FAST_RECRUITER)
    new_worker = processes.worker("--id", "new")
    with Recruiter.connect(db_uri) as rec:
        snoozing = SnoozesThenDone(db_uri, times=2, seconds=1).as_job_of(rec).enqueue()
    archived = wait_for(lambda: db.archived.find_one({"_id": snoozing}), timeout_s=120,
                        message="the snoozing job done (previous leader)")
    assert (archived["why"], archived["attempts"], archived["result"]) == ("done", 1, 3)
    assert runs_of(db_uri, str(snoozing)) == 3
    history = archived["executions"]
    assert [(e["outcome"], e["attempt"]) for e in history] == [("snoozed", 1), ("snoozed", 1), ("done", 1)]
    assert history[1]["started_at"] >= history[0]["snoozed_until"]
    old_leader.signal(signal.SIGTERM)
    assert old_leader.wait(30) == 0
    new_worker.signal(signal.SIGTERM)
    assert new_worker.wait(30) == 0

    # A previous worker runs a job as this release's leader leaves a snoozed one: once, when due.
    with Recruiter.connect(db_uri) as rec:
        job_id = Record(db_uri, n=5).as_job_of(rec).enqueue()
    due = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
    entry = {"attempt": 1, "outcome": "snoozed", "worker": "new", "pid": 1, "hostname": "h", "crashed": False,
             "scheduled_at": due - timedelta(seconds=10), "assigned_at": due - timedelta(seconds=10),
             "started_at": due - timedelta(seconds=10), "ended_at": due - timedelta(seconds=9),
             "snooze": 2, "snoozed_until": due}
    db.scheduled.update_one({"_id": job_id}, {"$set": {
        "scheduled_at": due, "snoozes": 2, "max_snoozes": 5, "executions": [entry], "last_execution": entry}})
    processes.recruiter()
    start_previous(processes, previous, "worker", "worker", "start", *FAST_WORKER, "--id", "old")
    done = wait_for(lambda: db.archived.find_one({"_id": job_id}), timeout_s=120,
                    message="the snoozed job done (previous worker)")
    assert (done["why"], done["attempts"], done["snoozes"]) == ("done", 1, 2)
    (started,) = list(db.ledger.find({"event": "start", "n": 5}))
    assert started["at"] >= due
    assert [e["outcome"] for e in done["executions"]] == ["snoozed", "done"]
