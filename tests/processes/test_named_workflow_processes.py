"""A named workflow (issue 42) with the real CLI processes: a fan-out of 5 then a fan-in, each
step run exactly once, the fan-in after every part has ended, the whole seen by
``recruiter workflows show``; and the same workflow run by 0.2.0 processes (the skew rule:
the ``workflow`` field is information they ignore, their ``after`` does the waiting)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from recruiter import Recruiter, Workflow
from tests.conftest import wait_for
from tests.flow_workables import Step, Sum
from tests.integration.test_cli_visible import cli
from tests.processes.conftest import FAST_RECRUITER, FAST_WORKER, Processes
from tests.processes.test_upgrades import Previous, start_previous
from tests.processes.test_upgrades import previous as previous  # 0.2.0 (a125777), built once per session


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
