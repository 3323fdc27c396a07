"""Dynamic workflows (issue 42) with the real CLI processes: a step adds three children and a join
its dependent also waits for; every step runs once, in order, and ``workflows show`` lists them.
And the skew rule: a 0.2.0 leader archives a step that added steps ``steps-not-added``, saying
why, never ``done`` as if they were added (its dependent is cancelled by its policy)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from recruiter import Recruiter, Workflow
from recruiter.domain.added import NOT_ADDED_REASON, STEPS_NOT_ADDED
from tests.conftest import wait_for
from tests.dynamic_workables import Spawner
from tests.flow_workables import Step
from tests.integration.test_cli_visible import cli
from tests.processes.conftest import FAST_RECRUITER, Processes
from tests.processes.test_upgrades import Previous, start_previous
from tests.processes.test_upgrades import previous as previous  # 0.2.0 (a125777), built once per session

pytestmark = pytest.mark.processes


def _spawning(db_uri: str) -> Workflow:
    wf = Workflow("dynamic")
    wf.step("spawn", Spawner(db_uri))
    wf.step("report", Step(db_uri, n=1000), deps=["spawn"])
    return wf


def test_a_step_adds_children_and_a_join_and_every_step_runs_once_in_order(
        processes: Processes, db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        done = _spawning(db_uri).enqueue(rec)
    processes.recruiter()
    processes.worker("--concurrency", "3")
    wait_for(lambda: db.archived.count_documents({}) == 6, timeout_s=90, message="every step archived")
    steps = {d["workflow"]["step"]: d for d in db.archived.find()}
    assert {n: d["why"] for n, d in steps.items()} == dict.fromkeys(
        ["spawn", "child-1", "child-2", "child-3", "join", "report"], "done")
    assert steps["spawn"]["added_steps"] == ["child-1", "child-2", "child-3", "join"]
    assert {steps[n]["workflow"]["added_by"] for n in ("child-1", "child-2", "child-3", "join")} == {"spawn"}
    starts = {s["job"]: s for s in db.ledger.find({"event": "start"})}
    ends = {e["job"]: e["at"] for e in db.ledger.find({"event": "end"})}
    assert sorted(starts) == sorted(str(d["_id"]) for d in steps.values()), "each step ran once"
    assert len(list(db.ledger.find({"event": "start"}))) == 6
    join, report = (starts[str(steps[n]["_id"])] for n in ("join", "report"))
    assert all(ends[str(steps[f"child-{k}"]["_id"])] <= join["at"] for k in (1, 2, 3)), "the join ran early"
    assert join["total"] == 6
    assert ends[str(steps["join"]["_id"])] <= report["at"], "report did not wait for the added steps"
    shown = json.loads(cli("workflows", "show", str(done.id), "--json", db_uri=db_uri).stdout)
    assert shown["counts"] == {"done": 6, "failed": 0, "pending": 0, "total": 6}


@pytest.mark.timeout(900)
def test_a_020_leader_archives_a_step_that_added_steps_as_not_added_and_adds_none(
        processes: Processes, previous: Previous, db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        done = _spawning(db_uri).enqueue(rec)
    start_previous(processes, previous, "recruiter", "start", *FAST_RECRUITER)
    processes.worker("--id", "new")
    report = wait_for(lambda: db.archived.find_one({"_id": done["report"]}), timeout_s=120,
                      message="the dependent archived (previous leader)")
    spawn = db.archived.find_one({"_id": done["spawn"]})
    assert (spawn["why"], spawn["done"], spawn["reason"]) == (STEPS_NOT_ADDED, False, NOT_ADDED_REASON)
    assert spawn["result"] == -1
    assert report["why"] == "upstream-failed"
    assert db.scheduled.count_documents({}) == 0
    assert db.archived.count_documents({}) == 2, "no step was added"
