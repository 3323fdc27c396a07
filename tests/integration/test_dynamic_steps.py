"""Dynamic workflows on the real server (recruiter.domain.adding, recruiter.domain.added, issue 42):
a running step adds steps to its workflow, written by the round in the transaction that archives
it done, once; its held dependents wait for them; what the round refuses archives the step
``steps-refused`` saying why, and writes nothing; a failed attempt adds nothing."""

from __future__ import annotations

from typing import Any

import pytest
from bson import ObjectId

from recruiter import Workflow
from recruiter.admin.workflow_view import read_workflow
from recruiter.domain.added import STEPS_NOT_ADDED, STEPS_REFUSED
from tests.dynamic_workables import (
    AddsNamed,
    AddsOutsideAWorkflow,
    AsyncSpawner,
    ChildSpawner,
    Spawner,
    SpawnsThenFailsOnce,
    TampersWithItsSteps,
)
from tests.flow_workables import Step
from tests.integration.test_dependencies import work_all
from tests.integration.test_never_lost import crash_at, no_fault
from tests.integration.test_processes_inproc import Harness, run, take_and_work


def spawning(uri: str, cls: type = Spawner, **kw: Any) -> Workflow:
    """``spawn`` (adds child-1..3 and join), then ``report`` waiting for it."""
    wf = Workflow("dynamic")
    wf.step("spawn", cls(uri, **kw))
    wf.step("report", Step(uri, n=1000), deps=["spawn"])
    return wf


async def steps(h: Harness, workflow_id: ObjectId) -> dict[str, dict[str, Any]]:
    """Every job of the workflow by step name, queued or archived."""
    where = {"workflow.id": workflow_id}
    return {d["workflow"]["step"]: d for coll in (h.db.scheduled, h.db.archived) async for d in coll.find(where)}


async def starts(h: Harness) -> list[int]:
    return [d["n"] for d in await h.ledger(event="start")]


@pytest.mark.parametrize("cls", [Spawner, AsyncSpawner, ChildSpawner])
def test_added_steps_are_written_with_the_archive_and_the_held_dependent_waits_for_them(
        db_uri: str, cls: type) -> None:
    """Sync (a thread), async (the loop) and in a child process alike."""
    async def scenario(h: Harness) -> None:
        done = await spawning(h.db_uri, cls).enqueue(h.producer)
        workers = [await h.worker(f"w{k}") for k in range(3)]
        assert await work_all(h, workers) == [done["spawn"]]
        found = await steps(h, done.id)
        assert sorted(found) == ["child-1", "child-2", "child-3", "join", "report", "spawn"]
        spawn = found["spawn"]
        assert (spawn["why"], spawn["added_steps"]) == ("done", ["child-1", "child-2", "child-3", "join"])
        added = {n: found[n] for n in ("child-1", "child-2", "child-3", "join")}
        assert {d["workflow"]["added_by"] for d in added.values()} == {"spawn"}
        assert {d["workflow"]["id"] for d in added.values()} == {done.id}
        assert found["join"]["workflow"]["deps"] == ["child-1", "child-2", "child-3"]
        assert found["join"]["after"]["pending"] == [added[f"child-{k}"]["_id"] for k in (1, 2, 3)]
        assert "after" not in found["child-1"], "a child waiting for nothing is due at once"
        report = found["report"]
        assert report["after"]["held"] is True, "report waits for what spawn added (hold_dependents)"
        assert set(report["after"]["pending"]) == {d["_id"] for d in added.values()}
        assert report["workflow"]["deps"] == ["spawn", "child-1", "child-2", "child-3", "join"]

        assert sorted(await work_all(h, workers)) == sorted(added[f"child-{k}"]["_id"] for k in (1, 2, 3))
        assert await work_all(h, workers) == [added["join"]["_id"]]
        assert await work_all(h, workers) == [done["report"]]
        ran = await starts(h)
        assert (ran[0], sorted(ran[1:4]), ran[4:]) == (-1, [1, 2, 3], [100, 1000]), "each once, in order"
        join = await h.archived(added["join"]["_id"])
        assert join is not None
        assert join["result"] == 6
        view = read_workflow(h.sync_db, done.id)
        assert view is not None
        assert {s.name for s in view.steps} == set(found), "workflows show lists the added steps"

    run(db_uri, scenario)


def test_without_hold_dependents_the_dependent_runs_once_the_adding_step_is_done(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        done = await spawning(h.db_uri, parts=2, join=False, hold=False).enqueue(h.producer)
        workers = [await h.worker(f"w{k}") for k in range(3)]
        assert await work_all(h, workers) == [done["spawn"]]
        found = await steps(h, done.id)
        assert "after" not in found["report"] or not found["report"]["after"].get("held")
        assert set(await work_all(h, workers)) == {found["child-1"]["_id"], found["child-2"]["_id"], done["report"]}

    run(db_uri, scenario)


def test_a_failed_attempt_adds_nothing_and_the_done_retry_adds_once(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        done = await spawning(h.db_uri, SpawnsThenFailsOnce, parts=2, join=False).enqueue(h.producer)
        worker = await h.worker("w1")
        assert await work_all(h, [worker]) == [done["spawn"]]
        assert sorted(await steps(h, done.id)) == ["report", "spawn"], "the failed attempt added nothing"
        assert (await h.job(done["spawn"]))["status"] == "retrying"
        assert await work_all(h, [worker]) == [done["spawn"]]
        found = await steps(h, done.id)
        assert sorted(found) == ["child-1", "child-2", "report", "spawn"]
        assert found["spawn"]["why"] == "done"

    run(db_uri, scenario)


def test_a_round_that_aborts_adds_nothing_and_a_replayed_outcome_adds_once(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        done = await spawning(h.db_uri).enqueue(h.producer)
        process, slot = await h.worker("w1")
        await h.round()
        await take_and_work(process, slot)
        entry = await h.roster("w1")
        assert entry is not None
        assert entry["outcome"]["steps"]
        h.recruiter.fault = crash_at("archive.between_insert_and_delete")
        with pytest.raises(RuntimeError, match="injected"):
            await h.round()
        assert sorted(await steps(h, done.id)) == ["report", "spawn"], "the aborted round wrote no step"
        h.recruiter.fault = no_fault
        assert (await h.round()).applied == 1
        assert await h.db.scheduled.count_documents({"workflow.added_by": "spawn"}) == 4
        # The same outcome again (a worker writing it twice, a round replaying it): added once.
        await h.db.roster.update_one({"_id": "w1"}, {"$set": {"outcome": entry["outcome"]}})
        await h.round()
        await h.recruiter.apply_outcomes(h.recruiter.c, [entry], h.clock.now())
        assert await h.db.scheduled.count_documents({"workflow.added_by": "spawn"}) == 4
        assert await h.db.archived.count_documents({"_id": done["spawn"]}) == 1

    run(db_uri, scenario)


@pytest.mark.parametrize(("name", "deps", "reason"), [
    ("report", [], "step 'report': the workflow already has a step of that name"),
    ("extra", ["nope"], "step 'extra' depends on 'nope': no such step"),
])
def test_steps_the_round_refuses_archive_the_step_saying_why_and_write_nothing(
        db_uri: str, name: str, deps: list[str], reason: str) -> None:
    async def scenario(h: Harness) -> None:
        wf = Workflow("refused")
        wf.step("adder", AddsNamed(h.db_uri, name, deps))
        wf.step("report", Step(h.db_uri, n=1), deps=["adder"])
        done = await wf.enqueue(h.producer)
        worker = await h.worker("w1")
        assert await work_all(h, [worker]) == [done["adder"]]
        adder = await h.archived(done["adder"])
        assert adder is not None
        assert adder["why"] == STEPS_REFUSED
        assert adder["reason"].startswith(f"the steps it added were refused: {reason}")
        assert adder["result"] == "added", "what it returned is kept"
        assert sorted(await steps(h, done.id)) == ["adder", "report"]
        report = await h.archived(done["report"])
        assert report is not None
        assert report["why"] == "upstream-failed", "its dependents follow their policy"

    run(db_uri, scenario)


def test_a_job_that_is_no_workflow_step_fails_its_attempt_when_it_adds(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id = await AddsOutsideAWorkflow(h.db_uri).as_job_of(h.producer).enqueue()
        worker = await h.worker("w1")
        assert await work_all(h, [worker]) == [job_id]
        job = await h.archived(job_id)
        assert job is not None
        assert job["why"] == "tried-too-many-times"
        assert job["last_execution"]["class"].endswith("StepsRefused")
        assert "this job is not a step of a workflow" in job["last_execution"]["message"]

    run(db_uri, scenario)


def test_a_step_added_after_a_step_that_ended_counts_it_at_once(db_uri: str) -> None:
    """A dep on a step already done counts at once; the added step is due at once."""
    async def scenario(h: Harness) -> None:
        wf = Workflow("late")
        wf.step("first", Step(h.db_uri, n=1))
        wf.step("adder", AddsNamed(h.db_uri, "extra", ["first"]), deps=["first"])
        done = await wf.enqueue(h.producer)
        worker = await h.worker("w1")
        assert await work_all(h, [worker]) == [done["first"]]
        assert await work_all(h, [worker]) == [done["adder"]]
        extra = (await steps(h, done.id))["extra"]
        assert extra["after"]["ids"] == [done["first"]]
        assert "held" not in extra["after"]
        assert await work_all(h, [worker]) == [extra["_id"]]

    run(db_uri, scenario)


def test_two_steps_adding_one_name_in_one_round_add_it_once(db_uri: str) -> None:
    """The round checks each outcome against the workflow and what it planned before it."""
    async def scenario(h: Harness) -> None:
        wf = Workflow("twice")
        wf.step("a", AddsNamed(h.db_uri, "extra", []))
        wf.step("b", AddsNamed(h.db_uri, "extra", []))
        done = await wf.enqueue(h.producer)
        workers = [await h.worker(f"w{k}") for k in range(2)]
        assert sorted(await work_all(h, workers)) == sorted([done["a"], done["b"]])
        whys = sorted([(await h.archived(done[n]) or {}).get("why") for n in ("a", "b")])
        assert whys == ["done", STEPS_REFUSED]
        assert await h.db.scheduled.count_documents({"workflow.step": "extra"}) == 1

    run(db_uri, scenario)


@pytest.mark.parametrize(("how", "why", "reason"), [
    ("deps", STEPS_REFUSED, "the steps it added were refused: step 'child': deps is not a list of step names"),
    # Not written to the roster at all: no update can store the name.
    ("dollar", STEPS_NOT_ADDED, "the steps it added could not be written: steps.0.job.workable.parameters.$where"),
])
def test_steps_a_job_tampered_with_are_refused_and_the_round_goes_on(db_uri: str, how: str, why: str,
                                                                     reason: str) -> None:
    async def scenario(h: Harness) -> None:
        wf = Workflow("hostile")
        wf.step("bad", TampersWithItsSteps(h.db_uri, how))
        wf.step("after", Step(h.db_uri, n=1))
        done = await wf.enqueue(h.producer)
        workers = [await h.worker(f"w{k}") for k in range(2)]
        assert sorted(await work_all(h, workers)) == sorted([done["bad"], done["after"]])
        bad = await h.archived(done["bad"])
        assert bad is not None
        assert (bad["why"], bad["result"]) == (why, how)
        assert bad["reason"].startswith(reason)
        assert (await h.archived(done["after"]) or {}).get("why") == "done", "the round applied the other outcome"
        assert await h.db.scheduled.count_documents({}) == 0

    run(db_uri, scenario)


def test_a_forged_lock_on_a_step_is_not_written(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        wf = Workflow("forged")
        wf.step("bad", TampersWithItsSteps(h.db_uri, "locked"))
        done = await wf.enqueue(h.producer)
        worker = await h.worker("w1")
        assert await work_all(h, [worker]) == [done["bad"]]
        child = await h.db.scheduled.find_one({"workflow.step": "child"})
        assert child is not None
        assert (child["locked"], child["status"], child.get("lock_token")) == (False, "queued", None)
        assert await work_all(h, [worker]) == [child["_id"]]

    run(db_uri, scenario)


def test_a_dependent_of_over_100_steps_stored_with_edges_also_waits_for_what_a_step_adds(db_uri: str) -> None:
    """``report`` waits for ``spawn`` and 100 more steps: it is stored with edges
    (recruiter.domain.edges), not ids. ``spawn`` adds two children with ``hold_dependents``:
    ``report`` gains an edge to each (with its policy for ``spawn``), and runs after them."""
    async def scenario(h: Harness) -> None:
        wf = Workflow("wide")
        wf.step("spawn", Spawner(h.db_uri, parts=2, join=False, hold=True))
        parts = wf.fan_out("p", [Step(h.db_uri, n=k) for k in range(1, 101)])
        wf.step("report", Step(h.db_uri, n=1000), deps=["spawn", *parts])
        done = await wf.enqueue(h.producer)
        report = await h.job(done["report"])
        assert report is not None
        assert report["after"]["edges"] == 101, "stored with edges"
        workers = [await h.worker(f"w{k}") for k in range(4)]
        ran: list[ObjectId] = []
        while done["spawn"] not in ran:
            ran += await work_all(h, workers)
        found = await steps(h, done.id)
        children = [found["child-1"]["_id"], found["child-2"]["_id"]]
        report = await h.job(done["report"])
        assert report is not None
        assert report["after"]["held"] is True
        assert report["after"]["edges"] == 103, "two edges more, one per added step"
        assert {e["upstream"] async for e in h.db.dependency_edges.find({"dependent": done["report"]})} >= set(children)
        assert report["workflow"]["deps"][-2:] == ["child-1", "child-2"]
        for _ in range(200):
            got = await work_all(h, workers)
            ran += got
            if done["report"] in got or not got:
                break
        assert ran[-1] == done["report"], "report runs last"
        assert set(children) <= set(ran[:-1]), "after the steps spawn added"
        archived = await h.archived(done["report"])
        assert archived is not None
        assert archived["why"] == "done"
        assert set(children) <= set(archived["after"]["ids"]), "its ids name what it waited for, added steps too"

    run(db_uri, scenario)
