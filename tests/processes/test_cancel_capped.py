"""A cancelled job that runs on in a thread keeps its ``max_running`` slot until it has stopped,
with the real processes; judged from the ledger of start and end times the jobs write."""

from __future__ import annotations

from typing import Any

from bson import ObjectId

from recruiter import Recruiter
from tests.conftest import wait_for
from tests.processes.conftest import Processes
from tests.processes.test_cli_errors import run_cli
from tests.processes.test_limits_processes import most_at_once
from tests.workables import Record, RunsOnAfterRelease, release

CAP = 2
THEN_S = 1.5  # how long the cancelled jobs run on once released: a thread cannot stop them


def _shown_in_threads(db: Any, ids: list[str]) -> bool:
    """Whether the workers' heartbeats show each of ``ids`` running in a thread."""
    seen = {str(s.get("working_on")) for d in db.heartbeats.find({}) for s in (d.get("slots") or {}).values()
            if s.get("working_in_thread") is True}
    return set(ids) <= seen


def test_cancelling_capped_jobs_running_in_threads_keeps_their_slots_until_they_stop(
        processes: Processes, db: Any, db_uri: str) -> None:
    done = run_cli("limits", "set", "--group", "capped", "--max-running", str(CAP), "--target", db_uri)
    assert done.returncode == 0, done.stderr
    # Every slot registered before the long jobs come, so that the first round hands each to a slot
    # of its own: a round that saw one slot's entries alone would hold the second behind the first
    # (--prefetch 1), and a job that never ends until released would keep it from starting.
    processes.worker("--group", "capped", "--concurrency", "4")
    wait_for(lambda: db.roster.count_documents({}) == 4 * 2, timeout_s=60, message="the slots and their lanes")
    with Recruiter.connect(db_uri) as rec:
        long = [str(RunsOnAfterRelease(db_uri, "long", THEN_S).as_job_of(rec).in_group("capped").enqueue())
                for _ in range(CAP)]
    processes.recruiter()
    wait_for(lambda: db.ledger.count_documents({"event": "start", "job": {"$in": long}}) == CAP, timeout_s=60,
             message="the long jobs to start")
    with Recruiter.connect(db_uri) as rec:  # they wait for the cap
        short = [str(Record(db_uri, n=10 + i).as_job_of(rec).in_group("capped").enqueue()) for i in range(CAP)]
    wait_for(lambda: _shown_in_threads(db, long), timeout_s=10, message="heartbeats showing the long jobs")

    out = run_cli("jobs", "cancel", *long, "--target", db_uri)
    assert out.returncode == 0, out.stderr
    for line, job in zip(out.stdout.splitlines(), long, strict=True):
        assert line.startswith(f"{job}: cancelled, still running in a thread on worker "), out.stdout
        assert "its slot is held until then" in line
    release(db_uri, "long")

    wait_for(lambda: db.ledger.count_documents({"event": "end", "job": {"$in": [*long, *short]}}) == 2 * CAP,
             timeout_s=60, message="every job to end")
    wait_for(lambda: db.archived.count_documents({"_id": {"$in": [ObjectId(j) for j in short]}}) == CAP,
             timeout_s=30, message="the queued jobs to be archived")
    wait_for(lambda: db.archived.count_documents({"halt.ended_at": {"$type": "date"}}) == CAP, timeout_s=30,
             message="the workers to report the cancelled jobs stopped")

    rows = list(db.ledger.find({"job": {"$in": [*long, *short]}}))
    starts = {r["job"]: r["at"] for r in rows if r["event"] == "start"}
    ends = {r["job"]: r["at"] for r in rows if r["event"] == "end"}
    assert set(starts) == set(ends) == {*long, *short}
    assert most_at_once([(starts[j], ends[j]) for j in starts]) <= CAP
    for job in long:
        archived = db.archived.find_one({"_id": ObjectId(job)})
        assert archived["why"] == "cancelled"
        halt = archived["halt"]
        assert halt["in_thread"] is True
        assert halt["ended_at"].replace(tzinfo=None) >= ends[job].replace(tzinfo=None)
    assert db.roster.count_documents({"halting": {"$exists": True}}) == 0
    shown = run_cli("jobs", "show", long[0], "--target", db_uri)
    assert shown.returncode == 0, shown.stderr
    assert "stopped at " in shown.stdout
