"""A named workflow (issue 42) with the real CLI processes: a fan-out of 5 then a fan-in, each
step run exactly once, the fan-in after every part has ended, the whole seen by
``recruiter workflows show``; and the same workflow run by 0.2.0 processes (the skew rule:
the ``workflow`` field is information they ignore, their ``after`` does the waiting)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from recruiter import Recruiter, Workflow
from tests.conftest import cli_in_process, wait_for
from tests.flow_workables import Step, Sum
from tests.integration.test_cli_visible import cli
from tests.processes.conftest import FAST_RECRUITER, FAST_WORKER, Processes
from tests.processes.test_upgrades import Previous, start_previous
from tests.processes.test_upgrades import previous as previous  # 0.2.0 (a125777), built once per session
from tests.workables import NeverReturns


def _fan(db_uri: str) -> tuple[Workflow, list[str]]:
    wf = Workflow("fan-out-fan-in")
    wf.step("split", Step(db_uri, n=0))
    parts = wf.fan_out("part", [Step(db_uri, n=k) for k in range(1, 6)], deps=["split"])
    wf.step("total", Sum(db_uri), deps=parts)
    return wf, parts


def test_a_fan_out_of_five_then_a_fan_in_runs_every_step_once_and_the_fan_in_last(
        processes: Processes, db: Any, db_uri: str) -> None:
    wf, parts = _fan(db_uri)
    with Recruiter.connect(db_uri) as rec:
        done = wf.enqueue(rec)
    processes.recruiter()
    processes.worker("--concurrency", "3")
    ran_once_in_order(db, db_uri, done, parts)


@pytest.mark.timeout(900)
def test_release_020_processes_run_a_named_workflow_as_this_release_does(
        processes: Processes, previous: Previous, db: Any, db_uri: str) -> None:
    wf, parts = _fan(db_uri)
    with Recruiter.connect(db_uri) as rec:
        done = wf.enqueue(rec)
    start_previous(processes, previous, "recruiter", "start", *FAST_RECRUITER)
    start_previous(processes, previous, "worker", "worker", "start", *FAST_WORKER, "--concurrency", "3")
    ran_once_in_order(db, db_uri, done, parts)


def ran_once_in_order(db: Any, db_uri: str, done: Any, parts: list[str]) -> None:
    wait_for(lambda: db.archived.count_documents({}) == 7, timeout_s=90, message="every step archived")
    assert {d["workflow"]["step"]: d["why"] for d in db.archived.find()} == {
        name: "done" for name in ["split", *parts, "total"]}
    ends = {e["job"]: e["at"] for e in db.ledger.find({"event": "end"})}
    starts = list(db.ledger.find({"event": "start"}))
    assert sorted(s["job"] for s in starts) == sorted(str(h) for h in done.handles.values())  # each once
    assert len(ends) == 7
    total = next(s for s in starts if s["job"] == str(done["total"]))
    assert all(ends[str(done[p])] <= total["at"] for p in parts), "the fan-in started before a part ended"
    assert all(ends[str(done["split"])] <= s["at"] for s in starts if s["job"] != str(done["split"]))
    assert total["total"] == 15
    shown = json.loads(cli("workflows", "show", str(done.id), "--json", db_uri=db_uri).stdout)
    assert shown["state"] == "done"
    assert shown["counts"] == {"done": 7, "failed": 0, "pending": 0, "total": 7}


def test_a_workflow_cancelled_while_a_step_runs_halts_it_and_cancels_every_pending_step(
        processes: Processes, db: Any, db_uri: str) -> None:
    """``recruiter workflows cancel`` with real processes: the running step (in a child process) is
    halted, the steps waiting for it and a queued one are cancelled, none of them ever runs; the
    step already done stays done; the worker goes on with other work."""
    with Recruiter.connect(db_uri) as rec:
        wf = Workflow("cancelled")
        wf.step("first", Step(db_uri, n=1))
        wf.step("stuck", NeverReturns(db_uri).as_job_of(rec).with_timeout(600), deps=["first"])  # a child process
        wf.step("after", Step(db_uri, n=2), deps=["stuck"])
        wf.step("later", Step(db_uri, n=3).as_job_of(rec).in_group("later"))  # no worker works on it
        done = wf.enqueue(rec)
    processes.recruiter()
    worker = processes.worker("--group", "generic")
    wait_for(lambda: db.ledger.find_one({"job": str(done["stuck"]), "event": "start"}), timeout_s=60,
             message="the stuck step to start")
    out = cli_in_process("workflows", "cancel", str(done.id), "--target", db_uri)
    assert out.returncode == 0, out.stderr
    steps = [done[name] for name in ("first", "stuck", "after", "later")]
    wait_for(lambda: db.archived.count_documents({"_id": {"$in": steps}}) == 4, timeout_s=60,
             message="every step archived")
    whys = {d["workflow"]["step"]: d["why"] for d in db.archived.find({"_id": {"$in": steps}})}
    assert whys == {"first": "done", "stuck": "cancelled", "after": "cancelled", "later": "cancelled"}, whys
    assert db.ledger.count_documents({"job": {"$in": [str(done["after"]), str(done["later"])]}}) == 0
    wait_for(lambda: "job.halted" in worker.log(), timeout_s=30, message="the worker to halt the stuck step")
    with Recruiter.connect(db_uri) as rec:
        following = Step(db_uri, n=4).as_job_of(rec).enqueue()
    wait_for(lambda: db.archived.find_one({"_id": following, "why": "done"}), timeout_s=30,
             message="the worker to run the next job")
