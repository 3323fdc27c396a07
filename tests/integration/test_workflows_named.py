"""Named workflows and batches (recruiter.producer.workflows, issue 42) on the real server: the
write is all or nothing, the steps run in order and are seen by step name (explain, the CLI's
workflows list|show|cancel|retry), a batch's callbacks and progress, hostile workflow fields."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import pytest
from bson import ObjectId

from recruiter import Batch, Recruiter, Workflow, WorkflowRefused
from recruiter.admin.workflow_view import read_workflow
from recruiter.admin.workflows import cancel_workflow, retry_workflow
from recruiter.domain.dependencies import HELD_UNTIL
from recruiter.domain.events import JobArchived
from recruiter.domain.job import JobRefused
from tests.flow_workables import Step, Sum
from tests.integration.test_cli_visible import cli
from tests.integration.test_dependencies import work_all
from tests.integration.test_processes_inproc import START, Harness, run
from tests.named_workables import FailsFirst
from tests.workables import AlwaysFails, Record


def report(uri: str, parts: int = 3) -> Workflow:
    wf = Workflow("monthly-report")
    wf.step("fetch", Step(uri, n=1))
    names = wf.fan_out("part", [Step(uri, n=10 * k) for k in range(1, parts + 1)], deps=["fetch"])
    wf.step("total", Sum(uri), deps=names)
    return wf


def test_a_workflow_is_stored_with_its_steps_named_and_each_waiting_for_its_deps(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        done = await report(h.db_uri).enqueue(h.producer)
        assert sorted(done.handles) == ["fetch", "part-1", "part-2", "part-3", "total"]
        docs = {d["workflow"]["step"]: d async for d in h.db.scheduled.find()}
        assert {d["workflow"]["id"] for d in docs.values()} == {done.id}
        assert docs["total"]["workflow"] == {"id": done.id, "name": "monthly-report", "step": "total",
                                             "deps": ["part-1", "part-2", "part-3"], "kind": "workflow"}
        assert docs["total"]["after"]["ids"] == [done[f"part-{k}"] for k in (1, 2, 3)]
        assert docs["part-2"]["after"]["ids"] == [done["fetch"]]
        assert docs["part-2"]["scheduled_at"] == HELD_UNTIL
        assert "after" not in docs["fetch"]
        workers = [await h.worker(f"w{k}") for k in range(3)]
        assert await work_all(h, workers) == [done["fetch"]]
        explained = cli("jobs", "explain", str(done["total"]), db_uri=h.db_uri).stdout
        assert "waiting on step part-1 (queued), part-2 (queued), part-3 (queued)" in explained
        assert set(await work_all(h, workers)) == {done[f"part-{k}"] for k in (1, 2, 3)}
        assert await work_all(h, workers) == [done["total"]]
        total = await h.archived(done["total"])
        assert total is not None
        assert total["result"] == 60
        assert total["workflow"]["step"] == "total"  # the history names its workflow and step
        view = read_workflow(h.sync_db, done.id)
        assert view is not None
        assert [(s.name, s.state) for s in view.steps] == [
            ("fetch", "done"), ("part-1", "done"), ("part-2", "done"), ("part-3", "done"), ("total", "done")]

    run(db_uri, scenario)


def _bad_shapes(uri: str) -> list[tuple[Workflow, str]]:
    cycle = Workflow("w")
    cycle.step("a", Step(uri), deps=["b"])
    cycle.step("b", Step(uri), deps=["a"])
    unknown = Workflow("w")
    unknown.step("a", Step(uri), deps=["nope"])
    twice = Workflow("w")
    twice.step("a", Step(uri))
    twice.step("a", Step(uri))
    return [(cycle, "cycle: a -> b -> a"), (unknown, "no such step"), (twice, "two steps are named 'a'")]


def test_a_bad_workflow_is_one_line_and_writes_nothing_even_when_the_server_refuses_its_last_step(
        db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        for wf, message in _bad_shapes(h.db_uri):
            with pytest.raises(WorkflowRefused, match=message):
                await wf.enqueue(h.producer)
        keyed = Workflow("w")
        keyed.step("a", Record(h.db_uri).as_job_of(h.producer).unique("k"))
        with pytest.raises(WorkflowRefused, match="step 'a': a workflow's step cannot have a unique key"):
            await keyed.enqueue(h.producer)
        assert await h.db.scheduled.count_documents({}) == 0
        taken = await Record(h.db_uri).as_job_of(h.producer).enqueue()
        wf = report(h.db_uri)
        clash = Record(h.db_uri).as_job_of(h.producer)
        wf.step("clash", replace(clash, options=replace(clash.options, job_id=taken)), deps=["total"])
        with pytest.raises(JobRefused, match=r"item 6 of 6: refused by the server.*nothing was written"):
            await wf.enqueue(h.producer)
        assert await h.db.scheduled.count_documents({}) == 1  # the job that was there, nothing more

    run(db_uri, scenario)


def test_a_batch_runs_on_complete_whatever_happened_and_on_success_only_if_all_succeeded(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        good = Batch("import", [Step(h.db_uri, n=k) for k in (1, 2)])
        good.on_success(Step(h.db_uri, n=100)).on_complete(Step(h.db_uri, n=200))
        bad = Batch("import", [Step(h.db_uri, n=3), AlwaysFails(h.db_uri)])
        bad.on_success(Step(h.db_uri, n=300)).on_complete(Step(h.db_uri, n=400))
        ok, ko = await good.enqueue(h.producer), await bad.enqueue(h.producer)
        view = read_workflow(h.sync_db, ko.id)
        assert view is not None
        assert view.kind == "batch"
        assert view.counts(jobs_only=True) == {"done": 0, "failed": 0, "pending": 2, "total": 2}
        workers = [await h.worker(f"w{k}") for k in range(4)]
        await work_all(h, workers)
        view = read_workflow(h.sync_db, ko.id)
        assert view is not None
        assert view.counts(jobs_only=True) == {"done": 1, "failed": 1, "pending": 0, "total": 2}
        for _ in range(2):
            await work_all(h, workers)
        ran = {e.get("n") for e in await h.ledger(event="start")}
        assert {100, 200, 400} <= ran
        assert 300 not in ran
        skipped = await h.archived(ko["on_success"])
        assert skipped is not None
        assert skipped["why"] == "upstream-failed"
        assert str(ko["job-2"]) in skipped["reason"]
        assert skipped["workflow"]["callback"] == "on_success"
        for run_ in (ok, ko):
            final = read_workflow(h.sync_db, run_.id)
            assert final is not None
            assert final.counts()["pending"] == 0

    run(db_uri, scenario)


async def worked_states(h: Harness, workflow_id: ObjectId, workers: list[Any], rounds: int) -> list[tuple[str, str]]:
    """Every step's (name, state) after ``rounds`` of rounds and work."""
    for _ in range(rounds):
        await work_all(h, workers)
    view = read_workflow(h.sync_db, workflow_id)
    assert view is not None
    return [(s.name, s.state) for s in view.steps]


def test_a_retried_step_resumes_its_dependents_and_a_done_step_is_kept(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        wf = Workflow("retried")
        wf.step("fetch", Step(h.db_uri, n=1))
        wf.step("flaky", FailsFirst(h.db_uri, "flaky"), deps=["fetch"])
        wf.step("report", Step(h.db_uri, n=3), deps=["flaky"])
        done = await wf.enqueue(h.producer)
        workers = [await h.worker("w1")]
        assert await worked_states(h, done.id, workers, 3) == [
            ("fetch", "done"), ("flaky", "not-scheduled-by-retry-policy"), ("report", "upstream-failed")]
        lines = [d.describe() for d in retry_workflow(h.sync_db, done.id, START, "flaky")]
        assert lines[0] == "fetch: kept (done)"
        assert lines[1].startswith("flaky: retried as ")
        assert "waits for fetch" in lines[1]
        assert lines[2].startswith("report: retried as ")
        assert "waits for flaky" in lines[2]
        view = read_workflow(h.sync_db, done.id)
        assert view is not None
        states = {s.name: s for s in view.steps}
        assert states["flaky"].state == "queued"  # its dep was done: released at once
        assert states["report"].state == "waiting"
        assert states["report"].doc["after"]["ids"] == [states["flaky"].job_id]
        assert states["flaky"].earlier == (done["flaky"],)
        for _ in range(2):
            await work_all(h, workers)
        view = read_workflow(h.sync_db, done.id)
        assert view is not None
        assert [(s.name, s.state) for s in view.steps] == [("fetch", "done"), ("flaky", "done"), ("report", "done")]
        starts = await h.ledger(event="start")
        assert [e.get("key", e.get("n")) for e in starts] == [1, "flaky", "flaky", 3]  # fetch ran once
        assert starts[3]["after"] == [str(states["flaky"].job_id)]

    run(db_uri, scenario)


def test_workflows_list_show_cancel_and_retry_on_the_command_line(db_uri: str, db: Any) -> None:
    with Recruiter.connect(db_uri) as rec:
        done = report(db_uri, parts=2).enqueue(rec)
        assert done.progress() == {"done": 0, "failed": 0, "pending": 4, "total": 4}
    listed = json.loads(cli("workflows", "list", "--json", db_uri=db_uri).stdout)
    assert listed == [{"id": str(done.id), "name": "monthly-report", "kind": "workflow", "state": "running",
                       "jobs": 4, "done": 0, "failed": 0, "pending": 4, "created_at": listed[0]["created_at"]}]
    assert "monthly-report" in cli("workflows", "list", db_uri=db_uri).stdout
    shown = json.loads(cli("workflows", "show", str(done.id), "--json", db_uri=db_uri).stdout)
    assert [(s["name"], s["state"], s["deps"]) for s in shown["steps"]] == [
        ("fetch", "queued", []), ("part-1", "waiting", ["fetch"]), ("part-2", "waiting", ["fetch"]),
        ("total", "waiting", ["part-1", "part-2"])]
    tree = cli("workflows", "show", str(done.id), db_uri=db_uri).stdout
    assert "└ total" in tree
    cancelled = cli("workflows", "cancel", str(done.id), db_uri=db_uri)
    assert cancelled.exit_code == 0
    assert cancelled.stdout.splitlines() == [f"{name}: cancelled (it was waiting in the queue)"
                                             for name in ("fetch", "part-1", "part-2", "total")]
    again = cli("workflows", "cancel", str(done.id), db_uri=db_uri)
    assert "fetch: not cancelled, already ended (cancelled)" in again.stdout
    retried = cli("workflows", "retry", str(done.id), db_uri=db_uri)
    assert retried.exit_code == 0, retried.output
    lines = retried.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["fetch", "part-1", "part-2", "total"]
    assert lines[0].startswith("fetch: retried as ")
    assert lines[0].endswith("(it ended cancelled)")
    assert lines[3].endswith("(it ended cancelled), waits for part-1, part-2")
    shown = json.loads(cli("workflows", "show", str(done.id), "--json", db_uri=db_uri).stdout)
    assert [(s["name"], s["state"], len(s["earlier_jobs"])) for s in shown["steps"]] == [
        ("fetch", "queued", 1), ("part-1", "waiting", 1), ("part-2", "waiting", 1), ("total", "waiting", 1)]
    fetch_copy = shown["steps"][0]["job"]
    held = db.scheduled.find_one({"_id": ObjectId(shown["steps"][1]["job"])})
    assert held["after"]["pending"] == [ObjectId(fetch_copy)]  # the dependents wait for the new job
    assert db.archived.find_one({"_id": done["fetch"]})["retried_as"] == ObjectId(fetch_copy)
    nothing = cli("workflows", "retry", str(done.id), db_uri=db_uri)
    assert nothing.exit_code == 1
    assert "has no failed step; nothing changed" in nothing.stderr
    missing = cli("workflows", "show", str(ObjectId()), db_uri=db_uri)
    assert missing.exit_code == 1
    assert "no workflow" in missing.stderr
    bad = cli("workflows", "retry", str(done.id), "--step", "nope", db_uri=db_uri)
    assert bad.exit_code == 1
    assert bad.stderr.strip().endswith("has no step 'nope'; nothing changed")


def test_a_malformed_workflow_field_is_set_aside_with_its_reason_and_the_job_still_runs(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        done = await report(h.db_uri, parts=1).enqueue(h.producer)
        garbage = await Record(h.db_uri, n=7).as_job_of(h.producer).enqueue()
        await h.db.scheduled.update_one({"_id": garbage}, {"$set": {"workflow": "garbage"}})
        await h.db.scheduled.update_one({"_id": done["part-1"]}, {"$set": {"workflow.step": 5}})
        listed = cli("workflows", "list", db_uri=h.db_uri)
        assert listed.exit_code == 0
        assert "1 job(s) set aside" in listed.stdout
        shown = cli("workflows", "show", str(done.id), db_uri=h.db_uri)
        assert shown.exit_code == 0
        assert f"set aside: job {done['part-1']}: workflow.step: not a name" in shown.stdout
        as_json = json.loads(cli("workflows", "show", str(done.id), "--json", db_uri=h.db_uri).stdout)
        assert as_json["set_aside"] == [{"job": str(done["part-1"]), "reason": "workflow.step: not a name"}]
        workers = [await h.worker("w1"), await h.worker("w2")]
        ran = await work_all(h, workers)
        assert set(ran) == {done["fetch"], garbage}  # the rounds never read the field
        explained = cli("jobs", "explain", str(done["total"]), db_uri=h.db_uri)
        assert explained.exit_code == 0

    run(db_uri, scenario)


def test_an_asyncio_producer_writes_a_workflow_and_reads_its_progress(db_uri: str, db: Any) -> None:
    from recruiter import AsyncRecruiter

    async def main() -> None:
        async with await AsyncRecruiter.connect(db_uri) as arec:
            done = await report(db_uri, parts=2).enqueue(arec)
            assert await done.progress_async() == {"done": 0, "failed": 0, "pending": 4, "total": 4}
            assert sorted(done.handles) == ["fetch", "part-1", "part-2", "total"]
            with pytest.raises(TypeError, match="progress_async"):
                done.progress()

    asyncio.run(main())
    assert db.scheduled.count_documents({"workflow.name": "monthly-report"}) == 4


def test_workflows_stats_counts_workflows_and_their_jobs_per_name(db_uri: str, db: Any) -> None:
    with Recruiter.connect(db_uri) as rec:
        first = report(db_uri, parts=1).enqueue(rec)
        report(db_uri, parts=2).enqueue(rec)
        Batch("import", [Step(db_uri, n=1)]).enqueue(rec)
        rec.cancel(first["total"])
    stats = json.loads(cli("workflows", "stats", "--json", db_uri=db_uri).stdout)
    assert stats == [
        {"name": "import", "workflows": 1, "running": 1, "done": 0, "failed": 0,
         "jobs": {"done": 0, "failed": 0, "pending": 1}},
        {"name": "monthly-report", "workflows": 2, "running": 2, "done": 0, "failed": 0,
         "jobs": {"done": 0, "failed": 1, "pending": 6}}]
    assert "monthly-report" in cli("workflows", "stats", db_uri=db_uri).stdout


def test_a_workflow_cancelled_while_a_step_is_assigned_says_its_worker_halts_it(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        done = await report(h.db_uri, parts=1).enqueue(h.producer)
        process, slot = await h.worker("w1")
        await h.round()
        assert await process.poll(slot) == done["fetch"]  # handed out, not finished
        lines = [d.describe() for d in cancel_workflow(h.sync_db, done.id, START)]
        assert lines[0].startswith("fetch: cancelled; worker w1 halts it")
        assert lines[1:] == ["part-1: cancelled (it was waiting in the queue)",
                             "total: cancelled (it was waiting in the queue)"]
        assert await h.db.scheduled.count_documents({}) == 0
        whys = {d["workflow"]["step"]: d["why"] async for d in h.db.archived.find()}
        assert whys == {"fetch": "cancelled", "part-1": "cancelled", "total": "cancelled"}

    run(db_uri, scenario)


def test_a_workflow_written_in_the_callers_transaction_exists_only_once_it_commits(db_uri: str, db: Any) -> None:
    with Recruiter.connect(db_uri) as rec:
        with rec.client.start_session() as session:
            session.start_transaction()
            report(db_uri, parts=1).enqueue(rec, session=session)
            session.abort_transaction()
        assert db.scheduled.count_documents({}) == 0
        with rec.client.start_session() as session, session.start_transaction():
            done = report(db_uri, parts=1).enqueue(rec, session=session)
        assert db.scheduled.count_documents({"workflow.id": done.id}) == 3


def test_a_step_with_a_per_outcome_policy_is_skipped_and_a_retry_keeps_its_policy(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        wf = Workflow("optional-branch")
        wf.step("flaky", FailsFirst(h.db_uri, "flaky"))
        wf.step("optional", Step(h.db_uri, n=2), deps=["flaky"], on={"failed": "skip"})
        wf.step("join", Step(h.db_uri, n=3), deps=["optional"], on={"skipped": "run"})
        done = await wf.enqueue(h.producer)
        workers = [await h.worker("w1")]
        assert await worked_states(h, done.id, workers, 3) == [
            ("flaky", "not-scheduled-by-retry-policy"), ("optional", "skipped"), ("join", "done")]
        lines = [d.describe() for d in retry_workflow(h.sync_db, done.id, START, "flaky")]
        assert lines[1].startswith("optional: retried as ")
        view = read_workflow(h.sync_db, done.id)
        assert view is not None
        copy = {s.name: s for s in view.steps}["optional"].doc
        # The copy waits with its step's policy, not cancel-on-anything: a failed flaky would skip it again.
        assert [g["policy"]["failed"] for g in copy["after"]["on"]] == ["skip"]
        assert dict(await worked_states(h, done.id, workers, 3))["optional"] == "done"

    run(db_uri, scenario)


def test_a_step_with_a_policy_that_is_not_one_is_refused_in_one_line() -> None:
    wf = Workflow("bad-policy")
    wf.step("a", Record("mongodb://unused", n=1))
    with pytest.raises(WorkflowRefused, match="step 'b': on: 'late' is not an outcome"):
        wf.step("b", Record("mongodb://unused", n=2), deps=["a"], on={"late": "run"})


def test_a_step_a_failed_upstream_cancels_is_an_archived_event_counted_by_workflow(db_uri: str) -> None:
    """The callback a failed job cancels (``upstream-failed``) reaches the leader's event bus as
    a ``JobArchived`` with its workflow's name, as every other archived step does: the metrics
    (``recruiter_workflow_steps_archived_total``, ``recruiter_jobs_archived_total``) count it."""
    async def scenario(h: Harness) -> None:
        archived: list[JobArchived] = []
        h.recruiter.bus.subscribe(lambda e: archived.append(e) if isinstance(e, JobArchived) else None)
        bad = Batch("import", [Step(h.db_uri, n=3), AlwaysFails(h.db_uri)])
        bad.on_success(Step(h.db_uri, n=300))
        ko = await bad.enqueue(h.producer)
        workers = [await h.worker(f"w{k}") for k in range(3)]
        for _ in range(3):
            await work_all(h, workers)
        cancelled = [e for e in archived if e.job_id == ko["on_success"]]
        assert len(cancelled) == 1, archived
        assert (cancelled[0].why, cancelled[0].workflow, cancelled[0].by) == ("upstream-failed", "import", "recruiter")
        assert cancelled[0].reason is not None
        assert str(ko["job-2"]) in cancelled[0].reason
        assert {e.why for e in archived if e.workflow == "import"} >= {"done", "upstream-failed"}

    run(db_uri, scenario)


def test_a_sub_workflow_is_written_with_its_parent_under_its_prefix_and_its_last_steps_end_it(
        db_uri: str) -> None:
    """``etl`` (extract, then two transforms, then load) as a sub-workflow of ``monthly``: its steps
    are ``etl:...`` steps of the one workflow, its first step waits for ``fetch``, ``report`` waits
    for its last step; every step runs once, in order. A Batch is a sub-workflow too."""
    async def scenario(h: Harness) -> None:
        etl = Workflow("etl")
        etl.step("extract", Step(h.db_uri, n=2))
        parts = etl.fan_out("transform", [Step(h.db_uri, n=3), Step(h.db_uri, n=4)], deps=["extract"])
        etl.step("load", Sum(h.db_uri, n=5), deps=parts)
        checks = Batch("checks", [Step(h.db_uri, n=6), Step(h.db_uri, n=7)])
        checks.on_complete(Step(h.db_uri, n=8))
        wf = Workflow("monthly")
        wf.step("fetch", Step(h.db_uri, n=1))
        last = wf.sub("etl", etl, deps=["fetch"])
        assert last == ["etl:load"]
        checked = wf.sub("checks", checks, deps=last, if_failed="run")
        assert checked == ["checks:on_complete"]
        wf.step("report", Step(h.db_uri, n=9), deps=[*last, *checked])
        run_ = await wf.enqueue(h.producer)
        stored = {d["workflow"]["step"]: d async for d in h.db.scheduled.find({"workflow.id": run_.id})}
        assert stored["etl:extract"]["workflow"]["deps"] == ["fetch"]
        assert stored["etl:load"]["workflow"]["deps"] == ["etl:transform-1", "etl:transform-2"]
        assert stored["checks:job-1"]["workflow"]["deps"] == ["etl:load"]
        assert stored["checks:on_complete"]["workflow"]["callback"] == "on_complete"
        assert {d["workflow"]["id"] for d in stored.values()} == {run_.id}
        workers = [await h.worker(f"w{k}") for k in range(3)]
        for _ in range(10):
            await work_all(h, workers)
        ran = [e["n"] for e in await h.ledger(event="start")]
        assert sorted(ran) == list(range(1, 10)), "each step once"
        order = {n: ran.index(n) for n in ran}
        assert order[1] < order[2] < min(order[3], order[4]) <= max(order[3], order[4]) < order[5]
        assert order[5] < min(order[6], order[7])
        assert max(order[6], order[7]) < order[8] < order[9]
        view = read_workflow(h.sync_db, run_.id)
        assert view is not None
        assert view.counts() == {"done": 9, "failed": 0, "pending": 0, "total": 9}

    run(db_uri, scenario)


def test_a_sub_workflow_is_refused_in_one_line_when_it_is_not_a_workflow_or_its_names_do_not_fit() -> None:
    wf = Workflow("w")
    with pytest.raises(WorkflowRefused, match="is not a Workflow"):
        wf.sub("s", object())  # type: ignore[arg-type]
    inner = Workflow("inner")
    inner.step("x" * 99, Record("mongodb://unused", n=1))
    with pytest.raises(WorkflowRefused, match="a step's name"):
        wf.sub("s", inner)
    looped = Workflow("looped")
    looped.step("a", Record("mongodb://unused", n=1), deps=["b"])
    looped.step("b", Record("mongodb://unused", n=2), deps=["a"])
    with pytest.raises(WorkflowRefused, match="cycle"):
        wf.sub("s", looped)
