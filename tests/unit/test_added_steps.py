"""Dynamic workflows' pure checks: a step added through ``ctx.workflow`` (recruiter.domain.adding),
and the steps an outcome adds read as untrusted input and planned against the stored workflow
(recruiter.domain.added)."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import ObjectId

from recruiter import JobContext, Workable
from recruiter.domain.added import (
    Existing,
    existing_of,
    is_adding,
    joined_after,
    parse_added,
    plan_additions,
)
from recruiter.domain.adding import MAX_ADDED_BYTES, MAX_ADDED_STEPS, StepsRefused, WorkflowSteps, plain_steps
from recruiter.domain.dependencies import HELD_UNTIL
from recruiter.domain.dependency_policy import CANCEL_ALL
from recruiter.domain.outcome import Outcome
from recruiter.domain.retry import Archive
from recruiter.domain.workflow import WorkflowTag
from tests.workables import Record, UniqueRecord

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TAG = WorkflowTag(ObjectId(), "wf", "spawn", (), "workflow")


class Big(Workable):
    def __init__(self, text: str) -> None:
        self.text = text

    def execute(self) -> None:
        return None


def adder() -> WorkflowSteps:
    return WorkflowSteps("spawn")


def test_steps_are_kept_as_plain_documents_with_their_deps_and_policy() -> None:
    steps = adder()
    names = steps.fan_out("child", [Record("u", n=k) for k in (1, 2)], hold_dependents=True)
    steps.add("join", Record("u", n=9), deps=[*names, "spawn"], on={"failed": "run"})
    added = steps.added
    assert [s["name"] for s in added] == ["child-1", "child-2", "join"]
    assert added[2]["deps"] == ["child-1", "child-2"], "a dep on the adding step itself is dropped"
    assert (added[0]["hold"], added[2]["hold"], added[2]["on"]) == (True, False, {"failed": "run"})
    assert "_id" not in added[0]["job"]
    assert added[0]["job"]["workable"]["class"].endswith("Record")
    assert plain_steps(steps) == added


@pytest.mark.parametrize(("call", "message"), [
    (lambda s: s.add("bad name", Record("u")), "a step's name must be"),
    (lambda s: s.add("spawn", Record("u")), "added twice"),
    (lambda s: (s.add("a", Record("u")), s.add("a", Record("u"))), "'a' is added twice"),
    (lambda s: s.add("a", Record("u"), deps="b"), "deps must be a list"),
    (lambda s: s.add("a", Record("u"), deps=["no way"]), "a dep must be"),
    (lambda s: s.add("a", Record("u"), if_failed="maybe"), "if_failed must be one of"),
    (lambda s: s.add("a", Record("u"), on={"failed": "explode"}), "step 'a': on"),
    (lambda s: s.add("a", UniqueRecord("u", n=1)), "cannot have a unique key"),
    (lambda s: s.add("a", object()), "expected a Workable or a job builder"),
    (lambda s: [s.add(n, Big("x" * (MAX_ADDED_BYTES // 2))) for n in "ab"], "the steps one attempt adds take at most"),
])
def test_a_step_that_cannot_be_added_raises_one_line_in_the_jobs_code(call: Any, message: str) -> None:
    steps = adder()
    with pytest.raises(StepsRefused, match=message) as refused:
        call(steps)
    assert "\n" not in str(refused.value)


def test_a_job_that_is_no_workflow_step_cannot_add() -> None:
    with pytest.raises(StepsRefused, match="not a step of a workflow"):
        JobContext(job_id="j", attempt=1, worker_id="w", group="g").workflow.add("a", Record("u"))


def test_one_attempt_adds_at_most_so_many_steps() -> None:
    steps = adder()
    steps.fan_out("s", [Record("u")] * MAX_ADDED_STEPS)
    with pytest.raises(StepsRefused, match=f"at most {MAX_ADDED_STEPS} steps"):
        steps.add("one-more", Record("u"))


def test_the_steps_travel_to_a_child_process_and_back() -> None:
    ctx = JobContext(job_id="j", attempt=1, worker_id="w", group="g", workflow=adder())
    copy = pickle.loads(pickle.dumps(ctx))
    copy.workflow.add("a", Record("u"))
    assert [s["name"] for s in plain_steps(copy.workflow) or []] == ["a"]
    assert plain_steps(ctx.workflow) is None


def test_steps_a_job_tampered_with_are_refused_not_unpickled() -> None:
    steps = adder()
    steps.add("a", Record("u"))
    steps._added.append({"name": "b", "job": object()})  # what a hostile job may do
    with pytest.raises(StepsRefused, match="could not be read"):
        plain_steps(steps)


def test_an_outcome_that_cannot_be_written_drops_its_steps_and_says_so() -> None:
    outcome = Outcome(ObjectId(), ObjectId(), 1, True, Archive("steps-not-added", "r"), steps=[{"name": "a"}])
    stripped = outcome.stripped("too big")
    assert stripped.steps is None
    assert isinstance(stripped.decision, Archive)
    assert stripped.decision.why == "steps-not-added"
    assert "could not be written with the steps it added: too big" in (stripped.decision.reason or "")
    assert "steps" not in stripped.to_document()
    assert outcome.to_document()["steps"] == [{"name": "a"}]


def test_only_an_outcome_decided_steps_not_added_adds() -> None:
    assert is_adding({"decision": {"archive": "steps-not-added"}, "steps": []})
    assert not is_adding({"decision": {"archive": "done"}, "steps": []})
    assert not is_adding({"decision": {"retry_at": NOW}, "steps": []})
    assert not is_adding({"decision": {"archive": "steps-not-added"}})


def added(*names: str, deps: tuple[str, ...] = (), hold: bool = False) -> list[dict[str, Any]]:
    steps = adder()
    for name in names:
        steps.add(name, Record("u"), deps=list(deps), hold_dependents=hold)
    return steps.added


@pytest.mark.parametrize(("raw", "message"), [
    ([], "not a list of 1 to"),
    ("x", "not a list of 1 to"),
    ([1], "a step is not a document"),
    ([{"name": "no way", "deps": [], "job": {}}], "a step's name is not a name"),
    ([{"name": "a", "deps": "b", "job": {}}], "step 'a': deps is not a list of step names"),
    ([{"name": "a", "deps": [], "job": 3}], "step 'a': its job is not a document"),
    ([{"name": "a", "deps": [], "job": {}, "if_failed": "maybe"}], "step 'a': its if_failed or on is malformed"),
    ([{"name": "a", "deps": [], "job": {}, "on": {"failed": "explode"}}], "step 'a': on"),
    ([{"name": "a", "deps": [], "job": {}}] * 2, "step 'a' is added twice"),
    ([{"name": "spawn", "deps": [], "job": {}}], "step 'spawn' is added twice"),
    ([{"name": "a", "deps": [], "job": {"x": "y" * (MAX_ADDED_BYTES + 10)}}], "more than the"),
    ([{"name": f"s{k}", "deps": [], "job": {}} for k in range(MAX_ADDED_STEPS + 1)], "not a list of 1 to"),
])
def test_an_outcomes_steps_are_read_as_untrusted_input(raw: object, message: str) -> None:
    problem = parse_added(raw, "spawn")
    assert isinstance(problem, str)
    assert message in problem


def workflow(*steps: tuple[str, tuple[str, ...], str | None]) -> Existing:
    """The stored workflow: (name, deps, why if archived)."""
    docs = [({"_id": ObjectId(), "workflow": {"id": TAG.id, "name": "wf", "step": n, "deps": list(d),
                                              "kind": "workflow"}, **({"why": why} if why else {})}, why is not None)
            for n, d, why in steps]
    return existing_of(sorted(docs, key=lambda d: d[1]))


def plan(raw: list[dict[str, Any]], existing: Existing) -> Any:
    steps = parse_added(raw, "spawn")
    assert not isinstance(steps, str), steps
    return plan_additions(TAG, existing.ids.get("spawn"), steps, existing, NOW)


BASE = (("fetch", (), "done"), ("spawn", ("fetch",), None), ("report", ("spawn",), None))


@pytest.mark.parametrize(("raw", "message"), [
    (added("report"), "step 'report': the workflow already has a step of that name"),
    (added("a", deps=("nope",)), "step 'a' depends on 'nope': no such step"),
    (added("a", deps=("report",), hold=True), "waits for 'report', which waits for 'spawn'"),
])
def test_the_round_refuses_what_only_the_stored_workflow_shows(raw: list[dict[str, Any]], message: str) -> None:
    problem = plan(raw, workflow(*BASE))
    assert isinstance(problem, str)
    assert message in problem


def test_a_workflow_grows_to_its_limit_and_no_further() -> None:
    many = workflow(*[(f"s{k}", (), None) for k in range(9_999)], ("spawn", (), None))
    problem = plan(added("one-more"), many)
    assert isinstance(problem, str)
    assert "at most 10000 steps; it has 10000" in problem


def test_the_added_steps_wait_by_id_for_their_deps_and_name_who_added_them() -> None:
    existing = workflow(*BASE)
    steps = adder()
    steps.fan_out("child", [Record("u"), Record("u")], deps=["fetch"])
    steps.add("join", Record("u").as_job_of(None).schedule_in(minutes=5),  # type: ignore[arg-type]
              deps=["child-1", "child-2"], hold_dependents=True)
    addition = plan(steps.added, existing)
    assert not isinstance(addition, str), addition
    child, _, join = addition.docs
    assert child["workflow"] == {"id": TAG.id, "name": "wf", "step": "child-1", "deps": ["fetch"],
                                 "kind": "workflow", "added_by": "spawn"}
    assert "held" not in child["after"], "fetch is done: counted at once, due at once"
    assert (child["after"]["ids"], child["after"]["pending"]) == ([existing.ids["fetch"]], [])
    assert child["scheduled_at"] == NOW
    assert join["after"]["pending"] == [addition.docs[0]["_id"], addition.docs[1]["_id"]]
    assert join["scheduled_at"] == HELD_UNTIL
    assert join["after"]["due_at"] == NOW + timedelta(minutes=5), "its delay counts from the round's time"
    assert (addition.held_ids, addition.held_names) == ([join["_id"]], ["join"])
    assert len({d["_id"] for d in addition.docs} | set(existing.ids.values())) == 6


def test_what_the_worker_sent_cannot_lock_unique_or_archive_a_step() -> None:
    raw = added("a")
    raw[0]["job"].update(_id=ObjectId(), locked=True, lock_token=ObjectId(), unique={"key": "k"}, why="done",
                         status="assigned", attempts=7, workflow={"id": "forged"})
    addition = plan(raw, workflow(*BASE))
    assert not isinstance(addition, str), addition
    (doc,) = addition.docs
    assert (doc["locked"], doc["status"], doc["attempts"]) == (False, "queued", 0)
    assert not {"lock_token", "unique", "why"} & set(doc)
    assert doc["_id"] != raw[0]["job"]["_id"]
    assert doc["workflow"]["id"] == TAG.id


@pytest.mark.parametrize(("field", "value", "message"), [
    ("group", 12, "group"),
    ("scheduled_at", "soon", "scheduled_at"),
    ("workable", {"class": "x:Y", "parameters": {"$where": 1}}, "starts with '$'"),
])
def test_a_step_whose_job_could_not_be_written_or_run_is_refused(field: str, value: object, message: str) -> None:
    """What the insert (the validator, field names) or a later copy into the roster would refuse
    never reaches the round's writes: its transaction would fail on every try."""
    raw = added("a")
    raw[0]["job"][field] = value
    problem = plan(raw, workflow(*BASE))
    assert isinstance(problem, str)
    assert problem.startswith("step 'a': its job is not valid: ")
    assert message in problem


def test_a_held_dependent_waits_for_the_added_steps_with_its_policy_for_the_adding_one() -> None:
    spawn, other, new = ObjectId(), ObjectId(), ObjectId()
    plain = {"ids": [spawn], "pending": [spawn], "failed": [], "if_failed": "run", "held": True}
    assert joined_after(plain, spawn, [new]) == {**plain, "ids": [spawn, new], "pending": [spawn, new]}
    grouped = {"ids": [spawn, other], "pending": [spawn, other], "if_failed": "cancel",
               "on": [{"ids": [spawn], "policy": {"failed": "run"}}, {"ids": [other], "policy": dict(CANCEL_ALL)}]}
    joined = joined_after(grouped, spawn, [new])
    assert joined["on"][0]["ids"] == [spawn, new]
    assert joined["on"][1]["ids"] == [other]
    assert joined["pending"] == [spawn, other, new]


def test_run_inline_checks_the_steps_a_job_adds_and_lists_those_of_a_done_run() -> None:
    from recruiter.testing import run_inline
    from tests.dynamic_workables import Fans

    done = run_inline(Fans(parts=2))
    assert done.why == "done"
    assert done.added_steps == ("child-1", "child-2", "join")
    refused = run_inline(Fans(name="no way"))
    assert refused.why == "not-scheduled-by-retry-policy"
    assert refused.added_steps == ()
    assert refused.last.error_class is not None
    assert refused.last.error_class.endswith("StepsRefused")


def test_a_retried_step_is_known_by_its_current_job() -> None:
    original, copy, done = ObjectId(), ObjectId(), ObjectId()
    tag = {"id": TAG.id, "name": "wf", "step": "part", "deps": [], "kind": "workflow"}
    existing = existing_of([({"_id": copy, "workflow": tag}, False),
                            ({"_id": original, "workflow": tag, "why": "failed", "retried_as": copy}, True),
                            ({"_id": done, "workflow": {**tag, "step": "fetch"}, "why": "done"}, True),
                            ({"_id": ObjectId(), "workflow": {"step": "no tag"}}, True)])
    assert existing.ids == {"part": copy, "fetch": done}
    assert existing.ended == {original: "failed", done: "done"}
