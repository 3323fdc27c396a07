"""A workflow's shape, checked before anything is written (recruiter.domain.workflow), and a stored
``workflow`` field read as untrusted input."""

from __future__ import annotations

import pytest
from bson import ObjectId

from recruiter.domain.workflow import (
    MAX_STEPS,
    StepSpec,
    WorkflowRefused,
    WorkflowTag,
    check_shape,
    downstream,
    parse_workflow,
    topological,
    workflow_name,
)


def test_a_dag_of_named_steps_passes_whatever_the_order_they_are_declared_in() -> None:
    check_shape([StepSpec("total", ("a", "b")), StepSpec("a", ("fetch",)), StepSpec("b", ("fetch",)),
                 StepSpec("fetch")])


@pytest.mark.parametrize(("steps", "message"), [
    ([], "at least one step"),
    ([StepSpec("a"), StepSpec("a")], "two steps are named 'a'"),
    ([StepSpec("a", ("nope",))], "step 'a' depends on 'nope': no such step"),
    ([StepSpec("a", ("a",))], "cycle: a -> a"),
    ([StepSpec("head"), StepSpec("a", ("head", "c")), StepSpec("b", ("a",)), StepSpec("c", ("b",)),
      StepSpec("tail", ("c",))], "cycle: a -> c -> b -> a"),
    ([StepSpec(f"s{k}") for k in range(MAX_STEPS + 1)], f"at most {MAX_STEPS} steps"),
])
def test_a_bad_shape_is_one_line_saying_nothing_was_written(steps: list[StepSpec], message: str) -> None:
    with pytest.raises(WorkflowRefused, match=message) as refused:
        check_shape(steps)
    assert "\n" not in str(refused.value)
    assert str(refused.value).endswith("nothing was written")


def test_the_order_puts_every_step_after_its_deps_and_a_stored_cycle_never_loops() -> None:
    deps = {"total": ["a", "b"], "a": ["fetch"], "b": ["fetch"], "fetch": []}
    assert topological(["total", "a", "b", "fetch"], deps) == ["fetch", "a", "b", "total"]
    assert topological(["x", "y"], {"x": ["y"], "y": ["x"]}) == ["x", "y"]
    assert topological(["x", "y"], {"x": ["y"], "y": ["x"]}, strict=True) == []
    assert downstream("a", deps) == {"a", "total"}


@pytest.mark.parametrize(("raw", "reason"), [
    ("garbage", "workflow: not a document"),
    ({"id": "x", "name": "n", "step": "s", "deps": [], "kind": "workflow"}, "workflow.id"),
    ({"id": ObjectId(), "name": 5, "step": "s", "deps": [], "kind": "workflow"}, "workflow.name"),
    ({"id": ObjectId(), "name": "n", "step": "a b", "deps": [], "kind": "workflow"}, "workflow.step"),
    ({"id": ObjectId(), "name": "n", "step": "s", "deps": "a", "kind": "workflow"}, "workflow.deps"),
    ({"id": ObjectId(), "name": "n", "step": "s", "deps": [], "kind": "chord"}, "workflow.kind"),
    ({"id": ObjectId(), "name": "n", "step": "s", "deps": [], "kind": "batch", "callback": 1}, "workflow.callback"),
])
def test_a_malformed_stored_field_gives_its_reason(raw: object, reason: str) -> None:
    parsed = parse_workflow(raw)
    assert isinstance(parsed, str)
    assert parsed.startswith(reason)


def test_a_well_formed_stored_field_is_read() -> None:
    wid = ObjectId()
    assert parse_workflow({"id": wid, "name": "n", "step": "s", "deps": ["a"], "kind": "batch",
                           "callback": "on_success"}) == WorkflowTag(wid, "n", "s", ("a",), "batch", "on_success")


def test_the_name_metrics_give_a_stored_field_is_its_workflow_s_or_malformed() -> None:
    good = {"id": ObjectId(), "name": "nightly", "step": "s", "deps": [], "kind": "workflow"}
    assert workflow_name(good) == "nightly"
    assert workflow_name(None) is None  # a job that is no step
    for bad in ({**good, "name": "n" * 101}, {**good, "kind": "chord"}, "nightly", [good], 0):
        assert workflow_name(bad) == "(malformed)"


def test_a_step_is_refused_as_it_is_added_for_a_bad_name_or_policy() -> None:
    from recruiter import Workflow

    wf = Workflow("w")
    with pytest.raises(WorkflowRefused, match="a step's name must be"):
        wf.step("a b", object())  # type: ignore[arg-type]
    with pytest.raises(WorkflowRefused, match="step 'a': if_failed must be one of cancel, run"):
        wf.step("a", object(), deps=["x"], if_failed="later")  # type: ignore[arg-type]
    with pytest.raises(WorkflowRefused, match="deps must be a list of step names"):
        wf.step("a", object(), deps="x")  # type: ignore[arg-type]
    with pytest.raises(WorkflowRefused, match="a workflow's name must be"):
        Workflow("")
