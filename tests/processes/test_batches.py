"""Short jobs in batches (``worker start --batch B``) with the real CLI processes: a worker
SIGKILLed while it holds a batch loses nothing and runs nothing twice that a fence could
have stopped (issue 40, :mod:`recruiter.domain.batching`).

The leader first measures the worker's jobs as short (a few no-op jobs), then is handed, in
one round, a job that blocks until the test releases it and several short jobs: the slot
takes them all in one assignment, the blocked one running and the others held ahead in its
batch lanes. The worker is SIGKILLed. Each held job must go back with its attempt given
back (no crash, no unproven return, even ``at_most_once``) and run exactly once elsewhere;
the blocked one is a crash, as without batches.
"""

from __future__ import annotations

import signal
from typing import Any

from recruiter import Recruiter
from recruiter.domain.lanes import lane_ids
from tests.conftest import wait_for
from tests.processes.conftest import Processes
from tests.processes.test_shutdown_and_recovery import started
from tests.workables import Quick, Record, WaitForRelease, release

BATCH = 8


def held_in_batch(db: Any, runner: str, jobs: list[object]) -> list[Any]:
    """Wait until every job of ``jobs`` is held ahead, not started, by a lane of ``runner``; their entries."""
    def held() -> list[Any] | None:
        entries = []
        for job_id in jobs:
            job = db.scheduled.find_one({"_id": job_id, "locked": True})
            entry = job and db.roster.find_one({"_id": job["locked_by"], f"assigned_to.{job['locked_by']}": job_id})
            if not entry or entry.get("ahead") != job["lock_token"] or entry.get("started") == entry["ahead"]:
                return None
            entries.append(entry)
        return entries
    entries = wait_for(held, timeout_s=60, message=f"{len(jobs)} jobs held ahead in a batch of {runner}")
    assert {e["runner"] for e in entries} == {runner}
    assert all(e["_id"] in lane_ids(runner, BATCH) for e in entries)
    return entries


def test_a_sigkilled_worker_holding_a_batch_loses_nothing_and_runs_nothing_twice(
        processes: Processes, db: Any, db_uri: str) -> None:
    processes.recruiter()
    worker = processes.worker("--id", "first", "--prefetch", "0", "--batch", str(BATCH))
    with Recruiter.connect(db_uri) as rec:
        warm = [Quick().as_job_of(rec).enqueue() for _ in range(3)]
    for job_id in warm:  # the leader measures the slot's run time: short
        wait_for(lambda j=job_id: db.archived.find_one({"_id": j, "why": "done"}), timeout_s=60,
                 message="a warm-up job archived")
    with Recruiter.connect(db_uri) as rec:
        rec.admin.pause("group", ["generic"])  # one round sees them all
        blocked = WaitForRelease(db_uri, "first").as_job_of(rec).enqueue()
        held = [Record(db_uri, n=i).as_job_of(rec).enqueue() for i in range(BATCH - 2)]
        held.append(Record(db_uri, n=99).as_job_of(rec).at_most_once().enqueue())
        rec.admin.resume("group", ["generic"])
    started(db, blocked)
    entries = held_in_batch(db, "first", held)
    assert len({e["_id"] for e in entries}) == len(held), "one lane each"
    assert db.ledger.count_documents({"event": "start", "job": {"$in": [str(j) for j in held]}}) == 0

    token = db.scheduled.find_one({"_id": blocked})["lock_token"]

    def beat_shows_it() -> bool:  # the evidence of a start that makes its rerun a crash, not a return
        return any(isinstance(s, dict) and s.get("working_token") == token
                   for d in db.heartbeats.find({"kind": "process"}) for s in (d.get("slots") or {}).values())

    wait_for(beat_shows_it, timeout_s=30, message="the worker's beat showing the blocked job running")
    worker.signal(signal.SIGKILL)
    worker.wait(10)
    release(db_uri, "first")  # the blocked job reruns (a crash) and ends
    processes.cleaner()
    processes.worker("--id", "second", "--prefetch", "1", "--batch", str(BATCH))

    for job_id in held:
        doc = wait_for(lambda j=job_id: db.archived.find_one({"_id": j}), timeout_s=90, message=f"{job_id} archived")
        assert (doc["why"], doc["attempts"], doc.get("crashes", 0), doc.get("unproven_returns", 0)) == \
            ("done", 1, 0, 0), doc
        assert [e["outcome"] for e in doc["executions"]] == ["done"]
        assert doc["last_return"].get("proven") is True, doc["last_return"]
        starts = [e["worker"] for e in db.ledger.find({"job": str(job_id), "event": "start"})]
        assert len(starts) == 1, starts
        assert starts[0] in lane_ids("second", BATCH), starts
    rerun = wait_for(lambda: db.archived.find_one({"_id": blocked}), timeout_s=60, message="the blocked job archived")
    assert (rerun["why"], rerun["crashes"]) == ("done", 1)
