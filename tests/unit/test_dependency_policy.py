"""Per-dependency, per-outcome policies (recruiter.domain.dependency_policy), and the same decisions
driven over random DAGs by Hypothesis: one terminal state each, never before the dependencies
resolve, never run twice."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from bson import ObjectId
from hypothesis import given, settings
from hypothesis import strategies as st

from recruiter.domain.dependencies import (
    UPSTREAM_FAILED,
    Archive,
    Release,
    Wait,
    decide,
    failures,
    parse_after,
    settle,
)
from recruiter.domain.dependency_policy import (
    CANCEL_ALL,
    FATES,
    OUTCOMES,
    RUN_ALL,
    SKIPPED,
    checked_policy,
    guarded,
    outcome_of,
)
from recruiter.domain.flows import chain, fan_in
from recruiter.domain.job import JobOptions, JobRefused, build_job_document
from tests.workables import Record

NOW = datetime(2026, 11, 29, 2, 0, tzinfo=UTC)
A, B, J = ObjectId(), ObjectId(), ObjectId()


class _Rec:
    def enqueue(self, item: Any, *, session: Any = None) -> Any:
        return item


def built(*calls: tuple[tuple[ObjectId, ...], dict[str, Any]]) -> dict[str, Any]:
    builder = Record("u").as_job_of(_Rec())  # type: ignore[arg-type]
    for ids, kw in calls:
        builder = builder.after(*ids, **kw)
    return dict(build_job_document(builder.workable, builder.options, NOW, job_id=J))


def test_every_why_but_done_is_one_outcome() -> None:
    assert outcome_of("done") is None
    assert [outcome_of(w) for w in ("tried-too-many-times", "crashed", "worker-gone", "cancelled", "halted",
                                    "upstream-failed", "unrunnable", "cannot-import", "malformed", "gone",
                                    SKIPPED, 7)] == [
        "failed", "failed", "failed", "cancelled", "cancelled", "cancelled", "unrunnable", "unrunnable",
        "quarantined", "gone", "skipped", "failed"]


def test_on_overrides_if_failed_per_outcome_and_refuses_what_it_does_not_know() -> None:
    policy = dict(checked_policy("run", {"cancelled": "skip"}))
    assert policy == {**dict(RUN_ALL), "cancelled": "skip"}
    with pytest.raises(ValueError, match="not an outcome"):
        checked_policy("cancel", {"crashed": "run"})
    with pytest.raises(ValueError, match="not one of cancel, skip, run"):
        checked_policy("cancel", {"failed": "ignore"})
    with pytest.raises(JobRefused, match="not an outcome"):
        built(((A,), {"on": {"oops": "run"}}))


def test_a_uniform_policy_is_stored_as_the_first_slice_wrote_it_and_unguarded() -> None:
    assert built(((A, B), {}))["after"] == {"ids": [A, B], "pending": [A, B], "failed": [], "if_failed": "cancel",
                                            "due_at": NOW, "held": True}
    assert built(((A,), {"if_failed": "run"}), ((B,), {"on": dict(RUN_ALL)}))["after"]["if_failed"] == "run"


def test_any_other_policy_is_grouped_in_on_and_guarded_by_the_jobs_own_id() -> None:
    after = built(((A,), {}), ((B,), {"on": {"failed": "skip"}}))["after"]
    assert after["pending"] == [A, B, J]  # J: a 0.2.0 leader finds itself queued, never decides it
    assert after["on"] == [{"ids": [A], "policy": dict(CANCEL_ALL)},
                           {"ids": [B], "policy": {**dict(CANCEL_ALL), "failed": "skip"}}]
    parsed = parse_after(after, J)
    assert not isinstance(parsed, str)
    assert parsed.pending == (A, B)
    assert parsed.guarded
    # A job given again takes the later call's policy.
    assert "on" not in built(((A, B), {"on": {"failed": "skip"}}), ((A, B), {}))["after"]


def test_the_most_severe_fate_decides_and_names_its_upstream() -> None:
    after = built(((A,), {"on": {"failed": "run"}}), ((B,), {"on": {"cancelled": "skip"}}))["after"]

    def decided(ended: dict[ObjectId, str]) -> Any:
        parsed = parse_after({**after, "pending": [J], "failed": failures(ended)}, J)
        assert not isinstance(parsed, str)
        return decide(parsed)

    assert decided({A: "tried-too-many-times", B: "done"}) == Release(NOW)
    assert decided({A: "tried-too-many-times", B: "cancelled"}) == Archive(
        SKIPPED, f"job {B} it waited for ended cancelled, which its policy skips on (and 1 more)")
    assert decided({A: "cancelled", B: "cancelled"}) == Archive(
        UPSTREAM_FAILED, f"job {A} it waited for ended cancelled (and 1 more)")


def test_a_stored_on_is_untrusted() -> None:
    base = built(((A,), {"on": {"failed": "skip"}}))["after"]
    for bad, problem in (("x", "not a list"), ([{"ids": "x", "policy": {}}], "ids"),
                         ([{"ids": [A], "policy": {"failed": "skip"}}], "every outcome")):
        assert problem in str(parse_after({**base, "on": bad}, J))


def test_settle_releases_at_once_only_what_the_policy_runs() -> None:
    runs = {"_id": J, "created_at": NOW, **build_job_document(
        Record("u"), JobOptions(after=(A,), policies=(checked_policy("cancel", {"cancelled": "run"}),)), NOW,
        job_id=J)}
    skips = {**runs, "after": {**runs["after"], "pending": [A, J],
                               "on": [{"ids": [A], "policy": {**dict(CANCEL_ALL), "cancelled": "skip"}}]}}
    assert settle([runs], {A}, {A: "cancelled"}) is None
    assert runs["scheduled_at"] == NOW
    assert runs["after"]["pending"] == []
    assert "held" not in runs["after"]
    assert settle([skips], {A}, {A: "cancelled"}) is None
    assert skips["after"]["held"]
    assert skips["after"]["pending"] == [J]


# -- Hypothesis: random DAGs, outcomes and policies, driven through the pure decisions ------------

POLICY = st.fixed_dictionaries({}, optional={o: st.sampled_from(FATES) for o in OUTCOMES})
OWN_OUTCOME = st.sampled_from(["done", "done", "tried-too-many-times", "cancelled", "unrunnable", "malformed",
                               "gone"])


@st.composite
def dags(draw: st.DrawFn) -> tuple[list[list[tuple[int, dict[str, str]]]], list[str], list[int]]:
    """Node k waits for some of nodes 0..k-1, each with a policy; every node's own outcome were it
    to run; an order in which upstreams end (a shuffle of those that do not wait)."""
    n = draw(st.integers(1, 9))
    deps = [draw(st.lists(st.tuples(st.integers(0, max(k - 1, 0)), POLICY), max_size=min(k, 4),
                          unique_by=lambda t: t[0])) if k else [] for k in range(n)]
    outcomes = draw(st.lists(OWN_OUTCOME, min_size=n, max_size=n))
    seed = draw(st.randoms(use_true_random=False))
    order = list(range(n))
    seed.shuffle(order)
    return deps, outcomes, order


def _document(k: int, ids: list[ObjectId], deps: list[tuple[int, dict[str, str]]]) -> dict[str, Any]:
    options = JobOptions(after=tuple(ids[d] for d, _ in deps),
                         policies=tuple(checked_policy("cancel", p) for _, p in deps))
    return dict(build_job_document(Record("u"), options, NOW, job_id=ids[k]))


def _expected(k: int, deps: list[tuple[int, dict[str, str]]], ended: dict[int, str]) -> str:
    """The fate a dependent must have, by the table of docs/guide/workflows.md."""
    fates = [dict(checked_policy("cancel", p))[o] for d, p in deps
             if (o := outcome_of(ended[d])) is not None]
    return "cancel" if "cancel" in fates else "skip" if "skip" in fates else "run"


@settings(max_examples=100, deadline=None)
@given(dags())
def test_every_job_of_a_random_dag_ends_once_never_before_what_it_waits_for(
        dag: tuple[list[list[tuple[int, dict[str, str]]]], list[str], list[int]]) -> None:
    deps, outcomes, order = dag
    ids = [ObjectId() for _ in deps]
    docs = {k: _document(k, ids, deps[k]) for k in range(len(deps)) if deps[k]}
    ended: dict[int, str] = {}
    ran: list[int] = []
    ready = [k for k in order if not deps[k]]  # run as they are handed out: in a random order
    while ready:
        k = ready.pop(0)
        assert k not in ended, "ended twice"
        assert all(d in ended for d, _ in deps[k]), "ran before its dependencies resolved"
        ran.append(k)
        _end(k, outcomes[k], ids, docs, deps, ended, ready)
    assert len(ran) == len(set(ran))
    assert set(ended) == set(range(len(deps))), "a job never ended"


def _end(k: int, why: str, ids: list[ObjectId], docs: dict[int, dict[str, Any]],
         deps: list[list[tuple[int, dict[str, str]]]], ended: dict[int, str], ready: list[int]) -> None:
    """Job ``k`` archived ``why``: pull it from its dependents as the store does, decide them."""
    ended[k] = why
    for j, doc in docs.items():
        after = doc["after"]
        if ids[k] not in after["pending"] or not after.get("held"):
            continue
        after["pending"].remove(ids[k])
        after["failed"] += failures({ids[k]: why})
        parsed = parse_after(after, ids[j])
        assert not isinstance(parsed, str)
        decision = decide(parsed)
        if isinstance(decision, Wait):
            assert decision.pending
            continue
        del after["held"]
        expected = _expected(j, deps[j], ended)
        if isinstance(decision, Release):
            assert expected == "run"
            ready.append(j)
        else:
            assert decision.why == {"skip": SKIPPED, "cancel": UPSTREAM_FAILED}[expected]
            _end(j, decision.why, ids, docs, deps, ended, ready)


@given(st.lists(POLICY.map(lambda p: checked_policy("cancel", p)), min_size=1, max_size=5),
       st.lists(OWN_OUTCOME, min_size=5, max_size=5))
def test_a_job_a_0_2_0_leader_could_decide_otherwise_is_guarded(policies: list[Any], whys: list[str]) -> None:
    """0.2.0 decides by if_failed alone: run if all done or if_failed is run. An unguarded job's
    if_failed must agree with its policies on whether it runs, whatever its upstreams' outcomes."""
    ids = [ObjectId() for _ in policies]
    doc = dict(build_job_document(Record("u"), JobOptions(after=tuple(ids), policies=tuple(policies)),
                                  NOW, job_id=J))
    after = doc["after"]
    assert (J in after["pending"]) == guarded(policies) == ("on" in after)
    if guarded(policies):
        return
    ended = dict(zip(ids, whys, strict=False))
    old_runs = all(w == "done" for w in ended.values()) or after["if_failed"] == "run"
    parsed = parse_after({**after, "pending": [], "failed": failures(ended)}, J)
    assert not isinstance(parsed, str)
    assert isinstance(decide(parsed), Release) == old_runs


def test_chain_and_fan_in_take_the_same_policy() -> None:
    _, second = chain(_Rec(), Record("a"), Record("b"), on={"failed": "skip"})  # type: ignore[arg-type]
    assert dict(second.options.policies[0])["failed"] == "skip"
    *_, last = fan_in(_Rec(), [Record("a")], Record("b"), if_failed="run", on={"gone": "cancel"})  # type: ignore[arg-type]
    assert dict(last.options.policies[0]) == {**dict(RUN_ALL), "gone": "cancel"}
    with pytest.raises(JobRefused, match="not one of cancel, skip, run"):
        chain(_Rec(), Record("a"), on={"failed": "maybe"})  # type: ignore[arg-type]
