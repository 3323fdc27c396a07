"""The pure side of a fan-in stored with dependency edges (recruiter.domain.edges): the stored form
the producer writes, the fold of the parts' fates, the decision once no edge is left, and every
malformed edge or counter read as a reason, never as a release."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from bson import ObjectId
from hypothesis import given
from hypothesis import strategies as st

from recruiter.domain.dependencies import UPSTREAM_FAILED, Archive, Release, Wait, decide, parse_after, waiting_line
from recruiter.domain.dependency_policy import CANCEL_ALL, OUTCOMES, RUN_ALL, SKIPPED, checked_policy, fate_of
from recruiter.domain.edges import FRONT, Fold, counted_form, parse_edge, parse_manifest, shared_policy

DUE = datetime(2026, 1, 1, tzinfo=UTC)
WHYS = ["done", "crashed", "cancelled", "unrunnable", "malformed", "gone", "skipped"]


def _held(n: int, if_failed: str = "cancel", on: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    ids = [ObjectId() for _ in range(n)]
    after: dict[str, Any] = {"ids": ids, "pending": list(ids), "failed": [], "if_failed": if_failed,
                             "due_at": DUE, "held": True}
    if on:
        after["on"] = on
    return {"_id": ObjectId(), "after": after}


def test_the_stored_form_is_the_guard_and_counters_with_one_edge_per_part_left_and_one_list() -> None:
    doc = _held(5)
    parts = doc["after"]["ids"]
    after, written = counted_form(doc, {parts[0]: "done", parts[1]: "crashed"})
    assert after["ids"] == [doc["_id"]] == after["pending"]
    assert (after["edges"], after["left"], after["failed_count"], after["severity"]) == (5, 3, 1, 2)
    assert (after["by"], after["by_why"]) == (parts[1], "crashed")
    manifest, *edges = written
    assert manifest == {"_id": doc["_id"], "manifest_of": doc["_id"], "ids": parts}
    assert [e["upstream"] for e in edges] == parts[2:]
    assert all(e["dependent"] == doc["_id"] and "policy" not in e for e in edges)
    counted = parse_after(after, doc["_id"])
    assert not isinstance(counted, str)
    assert isinstance(decide(counted), Wait)  # left > 0: never decided from the counters alone


def test_an_edge_keeps_its_policy_only_when_it_is_not_the_dependents() -> None:
    parts = [ObjectId(), ObjectId()]
    skip = dict(checked_policy("cancel", {"failed": "skip"}))
    doc = _held(0)
    doc["after"].update(ids=parts, pending=list(parts), on=[{"ids": [parts[0]], "policy": skip}])
    _, (_, first, second) = counted_form(doc, {})
    assert first["policy"] == skip
    assert "policy" not in second


@given(st.lists(st.tuples(st.sampled_from(WHYS), st.sampled_from(["cancel", "skip", "run"])), min_size=1, max_size=8))
def test_the_fold_gives_the_fate_the_inline_form_decides(ends: list[tuple[str, str]]) -> None:
    ids = [ObjectId() for _ in ends]
    policies = {i: tuple((o, fate) for o in OUTCOMES) for i, (_, fate) in zip(ids, ends, strict=True)}
    fold = Fold()
    for i, (why, _) in zip(ids, ends, strict=True):
        fold = fold.plus(i, why, policies[i])
    fate, by, why_of = fate_of([(i, why) for i, (why, _) in zip(ids, ends, strict=True)], policies, CANCEL_ALL)
    assert {-1: "run", 0: "run", 1: "skip", 2: "cancel"}[fold.severity] == fate
    if fold.severity > 0:
        assert (fold.by, fold.by_why) == (by, why_of)
    assert fold.failed == sum(why != "done" for why, _ in ends)


def test_once_no_edge_is_left_the_counters_decide() -> None:
    doc = _held(3)
    parts = doc["after"]["ids"]
    after, _ = counted_form(doc, dict.fromkeys(parts, "done"))
    parsed = parse_after(after, doc["_id"])
    assert not isinstance(parsed, str)
    assert decide(parsed) == Release(DUE)
    after, _ = counted_form(doc, {parts[0]: "done", parts[1]: "cancelled", parts[2]: "crashed"})
    parsed = parse_after(after, doc["_id"])
    assert not isinstance(parsed, str)
    assert decide(parsed) == Archive(UPSTREAM_FAILED, f"job {parts[1]} it waited for ended cancelled (and 1 more)")
    ran = _held(2, if_failed="run")
    after, _ = counted_form(ran, dict.fromkeys(ran["after"]["ids"], "crashed"))
    parsed = parse_after(after, ran["_id"])
    assert not isinstance(parsed, str)
    assert decide(parsed) == Release(DUE)
    assert parsed.default_policy() == RUN_ALL


def test_a_skip_names_its_part() -> None:
    doc = _held(2)
    parts = doc["after"]["ids"]
    doc["after"]["on"] = [{"ids": parts, "policy": dict(checked_policy("cancel", {"failed": "skip"}))}]
    after, _ = counted_form(doc, dict.fromkeys(parts, "crashed"))
    parsed = parse_after(after, doc["_id"])
    assert not isinstance(parsed, str)
    decision = decide(parsed)
    assert isinstance(decision, Archive)
    assert decision.why == SKIPPED
    assert decision.reason.startswith(f"job {parts[0]} it waited for ended crashed, which its policy skips on")


@pytest.mark.parametrize(("change", "reason"), [
    ({"left": "many"}, "after.left"), ({"left": 11}, "after.left"), ({"edges": 0}, "after.edges"),
    ({"failed_count": -1}, "after.failed_count"), ({"severity": 3}, "after.severity"),
    ({"severity": 2, "by": None}, "after.by"), ({"left": True}, "after.left"), ({"if_failed": "x"}, "after.if_failed"),
    ({"due_at": "soon"}, "after.due_at"),
])
def test_malformed_counters_are_a_reason_never_a_release(change: dict[str, Any], reason: str) -> None:
    doc = _held(10)
    after, _ = counted_form(doc, {})
    parsed = parse_after({**after, **change}, doc["_id"])
    assert isinstance(parsed, str)
    assert parsed.startswith(reason)


@pytest.mark.parametrize(("raw", "reason"), [
    ("x", "edge: not a document"), ({"upstream": ObjectId()}, "edge.dependent"),
    ({"dependent": ObjectId(), "upstream": "x"}, "edge.upstream"),
    ({"dependent": ObjectId(), "upstream": ObjectId(), "policy": {"failed": "skip"}}, "edge.policy"),
    ({"dependent": ObjectId(), "upstream": ObjectId(), "policy": dict(CANCEL_ALL) | {"gone": "maybe"}}, "edge.policy"),
])
def test_a_malformed_edge_is_a_reason(raw: object, reason: str) -> None:
    parsed = parse_edge(raw)
    assert isinstance(parsed, str)
    assert parsed.startswith(reason)


def test_a_malformed_list_is_a_reason() -> None:
    job_id = ObjectId()
    assert isinstance(parse_manifest(None, job_id), str)
    assert isinstance(parse_manifest({"ids": ["x"]}, job_id), str)
    assert isinstance(parse_manifest({"ids": []}, job_id), str)
    ids = [ObjectId()]
    assert parse_manifest({"ids": ids}, job_id) == ids


def test_the_waiting_line_counts_from_the_counters_and_names_the_front_read() -> None:
    doc = _held(120)
    after, _ = counted_form(doc, {})
    front = doc["after"]["ids"][:100]
    assert waiting_line({**after, FRONT: front}, doc["_id"]) == (
        f"waiting for 120 of 120 jobs: {', '.join(str(i) for i in front[:5])} …")
    assert waiting_line(after, doc["_id"]) == (
        "waiting for at most 120 of 120 jobs (their ids are in its dependency edges)")
    assert waiting_line({**after, FRONT: []}, doc["_id"]) == (
        "its dependencies have all ended; the leader releases it at its next look")
    parsed = parse_after(after, doc["_id"])
    assert not isinstance(parsed, str)
    assert parsed.counted is not None
    assert isinstance(decide(replace(parsed, counted=replace(parsed.counted, left=0))), Release)


def test_one_policy_shared_by_every_dependency_is_kept_for_a_retry() -> None:
    skip = dict(checked_policy("cancel", {"failed": "skip"}))
    doc = _held(3)
    doc["after"]["on"] = [{"ids": doc["after"]["ids"], "policy": skip}]
    after, _ = counted_form(doc, {})
    assert after["policy"] == skip
    assert shared_policy(after) == tuple(skip.items())
    assert "policy" not in counted_form(_held(3), {})[0]  # the if_failed's: nothing more to keep
    assert shared_policy({**after, "policy": {"failed": "skip"}}) is None  # malformed: none
