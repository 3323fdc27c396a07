"""Crashes are not failures, with the real CLI processes and real SIGKILLs.

What issue 13 asks to see, and where it is shown:

- a worker SIGKILLed mid-job with the DEFAULT policy (``DoNotDoItAgain``): the job
  reruns on another worker and is archived ``done`` with one crash in its executions:
  ``test_end_to_end.py::test_sigkilled_worker_is_removed_and_its_job_runs_again_elsewhere``
  (it runs with the default policy);
- with ``at_most_once`` it is archived ``crashed`` and never reruns: here;
- a job that kills every worker stops at ``--max-crashes``: here;
- forced stops give the job back without counting an attempt or a crash:
  ``test_shutdown_and_recovery.py`` (the grace period running out, a second signal).
"""

from __future__ import annotations

import signal
from typing import Any

from recruiter import Recruiter
from tests.conftest import wait_for
from tests.processes.conftest import Processes
from tests.workables import KillsItsWorker, SlowUntilKilled


def test_an_at_most_once_job_whose_worker_dies_is_archived_crashed_and_never_reruns(
        processes: Processes, db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        job_id = SlowUntilKilled(db_uri, first_attempt_s=120).as_job_of(rec).at_most_once().enqueue()
    processes.recruiter()
    processes.cleaner()
    first = processes.worker("--id", "first")
    wait_for(lambda: db.heartbeats.find_one({"ids": "first", "slots.first.working_on": job_id}), timeout_s=30,
             message="the heartbeat to show the job running")
    processes.worker("--id", "second")
    wait_for(lambda: db.roster.find_one({"_id": "second", "available": True}), timeout_s=30,
             message="the second worker idle")
    first.signal(signal.SIGKILL)
    first.wait(10)

    doc = wait_for(lambda: db.archived.find_one({"_id": job_id}), timeout_s=60, message="the job archived")
    assert doc["why"] == "crashed"
    assert doc["crashes"] == 1
    assert [(e["outcome"], e["worker"]) for e in doc["executions"]] == [("crashed", "first")]
    assert [e["worker"] for e in db.ledger.find({"job": str(job_id), "event": "start"})] == ["first"]


def test_a_job_that_kills_every_worker_stops_at_max_crashes(processes: Processes, db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        job_id = KillsItsWorker(db_uri).as_job_of(rec).enqueue()  # the default policy: crashes are not asked
    processes.recruiter()
    processes.cleaner()
    workers = [processes.worker("--id", f"w{i}", "--max-crashes", "2") for i in range(3)]

    doc = wait_for(lambda: db.archived.find_one({"_id": job_id}), timeout_s=90, message="the poison job archived")
    assert doc["why"] == "crashed-too-many-times"
    assert doc["crashes"] == 2
    starts = [e["worker"] for e in db.ledger.find({"job": str(job_id), "event": "start"})]
    assert len(starts) == 2, "it ran twice, then was archived without running"
    assert [e["outcome"] for e in doc["executions"]] == ["crashed", "crashed"]
    survivors = [w for w in workers if w.popen.poll() is None]
    assert len(survivors) == 1, "the worker that archived it lives on"
