"""The pure decisions about jobs that wait for other jobs (recruiter.domain.dependencies)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import pytest
from bson import ObjectId

from recruiter.domain.dependencies import (
    GONE,
    HELD_UNTIL,
    UPSTREAM_FAILED,
    After,
    Archive,
    DependencyRefused,
    Release,
    Wait,
    checked_ids,
    cycle_problem,
    decide,
    held_fields,
    parse_after,
    settle,
    waited_for,
    waiting_line,
)
from recruiter.domain.dependency_policy import CANCEL_ALL, RUN_ALL
from recruiter.domain.job import JobOptions, JobRefused, build_job_document
from tests.workables import Record

NOW = datetime(2026, 11, 29, 2, 0, tzinfo=UTC)
A, B, C = ObjectId(), ObjectId(), ObjectId()


def after(**changes: Any) -> After:
    return After(**{"ids": (A, B), "pending": (), "failed": (), "if_failed": "cancel", "due_at": NOW, **changes})


def test_a_job_waits_while_anything_is_pending_then_is_released_at_its_own_time() -> None:
    assert decide(after(pending=(B,))) == Wait((B,))
    assert decide(after(pending=(B,), failed=((A, "cancelled"),))) == Wait((B,))
    assert decide(after()) == Release(NOW)


def test_a_failed_dependency_archives_the_job_naming_it_unless_it_runs_anyway() -> None:
    failed = after(failed=((A, "cancelled"), (B, GONE)))
    assert decide(failed) == Archive(UPSTREAM_FAILED, f"job {A} it waited for ended cancelled (and 1 more)")
    assert decide(after(failed=((B, "unrunnable"),))) == Archive(UPSTREAM_FAILED,
                                                                  f"job {B} it waited for ended unrunnable")
    assert decide(after(failed=((A, "cancelled"),), if_failed="run")) == Release(NOW)


def test_a_held_job_is_stored_past_any_due_time_with_its_own_kept() -> None:
    doc = build_job_document(Record("u"), JobOptions(after=(A, B)), NOW)
    assert doc["scheduled_at"] == HELD_UNTIL
    assert doc.get("after") == {"ids": [A, B], "pending": [A, B], "failed": [], "if_failed": "cancel",
                                "due_at": NOW, "held": True}
    assert held_fields([(A, RUN_ALL)], NOW, C)["after"]["if_failed"] == "run"
    assert "after" not in build_job_document(Record("u"), JobOptions(), NOW)


def test_the_builder_checks_what_a_job_waits_for() -> None:
    assert checked_ids([A, str(B), A]) == (A, B)
    with pytest.raises(DependencyRefused, match="at least one"):
        checked_ids([])
    with pytest.raises(DependencyRefused, match="handles or ids"):
        checked_ids(["nope"])
    builder: Any = Record("u").as_job_of(object())  # type: ignore[arg-type]
    with pytest.raises(JobRefused, match="if_failed must be one of cancel, run"):
        builder.after(A, if_failed="skip")
    with pytest.raises(JobRefused, match="unique job cannot wait"):
        builder.after(A).unique("k").build(NOW)


@pytest.mark.parametrize(("raw", "problem"), [
    (None, "after: not a document"),
    ({"ids": [], "pending": [], "if_failed": "cancel", "due_at": NOW}, "after.ids"),
    ({"ids": ["x"], "pending": [], "if_failed": "cancel", "due_at": NOW}, "after.ids"),
    ({"ids": [A], "pending": "x", "if_failed": "cancel", "due_at": NOW}, "after.pending"),
    ({"ids": [A], "pending": [], "failed": [{"id": A}], "if_failed": "cancel", "due_at": NOW}, "after.failed"),
    ({"ids": [A], "pending": [], "if_failed": {"$x": 1}, "due_at": NOW}, "after.if_failed"),
    ({"ids": [A], "pending": [], "if_failed": "run", "due_at": "soon"}, "after.due_at"),
])
def test_a_stored_dependency_list_is_untrusted(raw: object, problem: str) -> None:
    found = parse_after(raw)
    assert isinstance(found, str)
    assert found.startswith(problem)


def test_settle_refuses_a_stranger_and_a_cycle_and_counts_what_has_ended() -> None:
    def doc(job_id: ObjectId, *ids: ObjectId, if_failed: str = "cancel") -> dict[str, Any]:
        policy = RUN_ALL if if_failed == "run" else CANCEL_ALL
        return ({"_id": job_id, "created_at": NOW, **held_fields([(i, policy) for i in ids], NOW, job_id)}
                if ids else {"_id": job_id})

    assert settle([doc(C, A)], set(), {}) == f"job {C} waits for {A}: no such job (neither queued nor archived)"
    assert "cycle" in str(settle([doc(A, B), doc(B, A)], set(), {}))
    assert settle([doc(A), doc(B, A), doc(C, A, B)], set(), {}) is None  # within the batch, no cycle

    done, failed, waits = doc(C, A), doc(C, A), doc(C, A, B)
    assert settle([done], {A}, {A: "done"}) is None
    assert done["scheduled_at"] == NOW
    assert "held" not in done["after"]
    assert done["after"]["released_at"] == NOW
    assert settle([failed], {A}, {A: "cancelled"}) is None  # held, nothing pending: the leader archives it
    assert failed["after"] == {**failed["after"], "pending": [], "failed": [{"id": A, "why": "cancelled"}],
                               "held": True}
    assert settle([waits], {A, B}, {A: "done"}) is None
    assert waits["after"]["pending"] == [B]


def test_a_long_chain_in_one_batch_is_checked_without_recursion() -> None:
    ids = [ObjectId() for _ in range(5000)]
    docs = [{"_id": ids[0]}] + [{"_id": i, "after": {"ids": [p]}} for p, i in itertools.pairwise(ids)]
    assert cycle_problem(docs) is None
    docs[0]["after"] = {"ids": [ids[-1]]}
    assert "cycle" in str(cycle_problem(docs))


def test_what_a_held_job_waits_for_in_one_line() -> None:
    fields = held_fields([(A, CANCEL_ALL), (B, CANCEL_ALL)], NOW, C)["after"]
    assert waiting_line(fields) == f"waiting for 2 jobs: {A}, {B}"
    assert waiting_line({**fields, "pending": [B]}) == f"waiting for 1 job: {B}"
    assert waiting_line({**fields, "pending": []}).startswith("its dependencies have all ended")
    assert waiting_line({**fields, "held": False}) is None
    assert waiting_line(None) is None
    assert waiting_line({"held": True, "ids": "x"}) == "waits for other jobs, but its after.ids: not a list " \
                                                     "of 1 to 10000 job ids"
    assert waited_for({"after": fields}) == (str(A), str(B))
    assert waited_for({"after": {"ids": "x"}}) == ()
