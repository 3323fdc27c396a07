"""``worker start --burst`` with the real CLI: it exits (status 0) once nothing is left for its groups."""

from __future__ import annotations

from typing import Any

from recruiter import Recruiter
from tests.conftest import wait_for
from tests.processes.conftest import FAST_WORKER, Processes
from tests.workables import Record


def test_a_burst_worker_runs_what_is_due_for_its_groups_then_exits(
        processes: Processes, db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        mine = rec.enqueue_many(Record(db_uri, n=i, sleep_s=0.2).as_job_of(rec).in_group("a") for i in range(4))
        other = Record(db_uri, n=9).as_job_of(rec).in_group("b").enqueue()
        later = Record(db_uri, n=10).as_job_of(rec).in_group("a").schedule_in(minutes=30).enqueue()
    processes.recruiter()
    worker = processes.worker("--group", "a", "--concurrency", "2", "--burst")

    assert worker.wait(60) == 0
    assert "worker.burst_done" in worker.log()
    archived = {d["_id"]: d for d in db.archived.find()}
    assert set(archived) == set(mine), "it ran every due job of its group, and only those"
    assert {d["why"] for d in archived.values()} == {"done"}
    assert db.scheduled.find_one({"_id": other})["attempts"] == 0, "another group's job is left"
    assert db.scheduled.find_one({"_id": later})["attempts"] == 0, "a job due later is not waited for"
    assert db.roster.count_documents({}) == 0, "it left the roster"


def test_burst_is_also_an_environment_variable_and_an_idle_burst_worker_exits_at_once(
        processes: Processes, db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        paused_job = Record(db_uri, n=1).as_job_of(rec).in_group("held").enqueue()
    db.metadata.update_one({"_id": "paused"}, {"$set": {"groups": ["held"]}}, upsert=True)
    worker = processes.start("worker", "worker", "start", *FAST_WORKER, "--group", "held",
                             env={"RECRUITER_BURST": "1"})
    assert worker.wait(60) == 0, "a paused group's job does not keep it waiting"
    assert "worker.burst_done" in worker.log()
    wait_for(lambda: db.roster.count_documents({}) == 0, timeout_s=10, message="the roster empty")
    assert db.scheduled.find_one({"_id": paused_job})["attempts"] == 0
