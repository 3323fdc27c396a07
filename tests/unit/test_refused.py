"""A job's refusals as every view reads them (recruiter.domain.refused): who, why, until, the fix;
untrusted documents shown as malformed, never raising; and the refusal as stored, bounded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from recruiter.domain.following import view_of
from recruiter.domain.outcome import reschedule_update
from recruiter.domain.refusals import (
    CANNOT_IMPORT,
    MAX_CLASS_CHARS,
    MAX_FIX_CHARS,
    MAX_REASON_CHARS,
    NOT_ALLOWED,
    fix_for,
    refusal_document,
)
from recruiter.domain.refused import MALFORMED, refused_json, refused_of

NOW = datetime(2026, 11, 28, 12, tzinfo=UTC)
UNTIL = NOW + timedelta(hours=1)


def waiting(*refusals: object, **fields: Any) -> dict[str, Any]:
    return {"_id": 1, "status": "retrying", "locked": False, "refusals": list(refusals), "refusals_until": UNTIL,
            **fields}


def test_no_refusal_is_none() -> None:
    assert refused_of({}) is None
    assert refused_of({"refusals": []}) is None


def test_the_newest_refusal_tells_why_and_every_worker_is_named_once() -> None:
    old = refusal_document("p1", "a", "cannot import jobs:Send: no module named 'jobs'", NOW - timedelta(seconds=9))
    new = refusal_document("p2", "b", "class not allowed: jobs:Send (module 'jobs' ...)", NOW, kind=NOT_ALLOWED,
                           name="jobs:Send", fix="allow the module on the worker: --allow-module jobs")
    refused = refused_of(waiting(old, new, dict(old)))
    assert refused is not None
    assert refused.workers == ("a", "b")  # newest first, each once
    assert refused.count == 3
    assert refused.kind == CANNOT_IMPORT  # the newest: an older worker's, kind read from its reason
    assert refused.until == UNTIL
    assert refused.current
    refused = refused_of(waiting(old, new))
    assert refused is not None
    assert refused.kind == NOT_ALLOWED
    assert refused.name == "jobs:Send"
    assert refused.short() == "refused by workers b, a: module not allowed (jobs:Send)"
    assert refused.describe() == (
        "refused by workers b, a: class not allowed: jobs:Send (module 'jobs' ...); kept from them until "
        "2026-11-28 13:00:00 UTC (a refusal after that archives it unrunnable); to fix: allow the module on "
        "the worker: --allow-module jobs")
    assert refused_json(refused) == {
        "workers": ["b", "a"], "count": 2, "kind": NOT_ALLOWED, "class": "jobs:Send",
        "reason": "class not allowed: jobs:Send (module 'jobs' ...)",
        "fix": "allow the module on the worker: --allow-module jobs", "at": NOW.isoformat(),
        "until": UNTIL.isoformat(), "current": True}


def test_without_a_stored_fix_one_is_made_from_the_kind() -> None:
    refused = refused_of(waiting(refusal_document("p", "w", "cannot import jobs:Send: nope", NOW, name="jobs:Send")))
    assert refused is not None
    assert refused.fix == fix_for(CANNOT_IMPORT, "jobs")
    assert "start the worker in the project directory" in refused.fix
    assert "--import-path" in refused.fix


def test_current_only_while_it_waits_for_the_refusal() -> None:
    refusal = refusal_document("p", "w", "cannot import x:Y", NOW)
    assert refused_of(waiting(refusal)).current  # type: ignore[union-attr]
    ran_since = waiting(refusal, last_execution={"ended_at": NOW + timedelta(seconds=1)})
    assert not refused_of(ran_since).current  # type: ignore[union-attr]  # a later attempt failed: a retry
    assert not refused_of(waiting(refusal, locked=True)).current  # type: ignore[union-attr]
    assert not refused_of(waiting(refusal), archived=True).current  # type: ignore[union-attr]
    view = view_of(1, None, waiting(refusal, why="unrunnable"), None, NOW)
    assert view is not None
    assert view.refused is not None
    assert not view.refused.current
    assert view.refused.describe().startswith("refused by worker w: cannot import x:Y; kept from them until ")


def test_malformed_refusals_are_shown_as_malformed() -> None:
    cases = {
        "malformed refusals: expected a list, found str": {"refusals": "junk"},
        "malformed refusal: expected a document, found int": waiting(7),
        "malformed refusal: reason is dict, not text": waiting({"worker": "w", "reason": {"$gt": ""}}),
    }
    for text, doc in cases.items():
        refused = refused_of(doc)
        assert refused is not None
        assert refused.kind == MALFORMED
        assert refused.reason == text
        assert refused.label == "malformed refusal"
        refused.describe()
    refused = refused_of(waiting({"worker": 5, "reason": "x" * 10_000, "kind": "odd", "class": ["a"], "fix": 3}))
    assert refused is not None
    assert refused.workers == ("?",)
    assert len(refused.reason) == MAX_REASON_CHARS
    assert refused.kind is None
    assert refused.name is None
    assert refused.fix == fix_for(None, None)


def test_a_refusal_is_bounded_as_stored() -> None:
    doc = refusal_document("p", "w", "r" * 9000, NOW, kind="odd", name="n" * 9000, fix="f" * 9000)
    assert (len(str(doc["reason"])), len(str(doc["class"])), len(str(doc["fix"]))) == (
        MAX_REASON_CHARS, MAX_CLASS_CHARS, MAX_FIX_CHARS)
    assert "kind" not in doc  # only the kinds the views know
    # Applying an outcome keeps the kind, class and fix, cut again (the outcome is the worker's word).
    refusal = {**doc, "kind": NOT_ALLOWED, "fix": "f" * 9000, "until": UNTIL}
    outcome = {"token": 1, "executed": False, "decision": {"retry_at": NOW}, "refusal": refusal}
    _, update = reschedule_update({"_id": 1}, outcome)
    entry = update["$push"]["refusals"]["$each"][0]
    assert entry["kind"] == NOT_ALLOWED
    assert len(entry["fix"]) == MAX_FIX_CHARS
    assert entry["class"] == "n" * MAX_CLASS_CHARS


values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20) | st.just(NOW),
                      lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.sampled_from(["worker", "reason", "kind", "class", "fix", "at", "process"]),
                                        inner, max_size=6), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(refusals=values, until=values, status=values, locked=values, last=values)
def test_any_document_gives_a_reading_and_never_raises(refusals: object, until: object, status: object,
                                                       locked: object, last: object) -> None:
    doc = {"refusals": refusals, "refusals_until": until, "status": status, "locked": locked, "last_execution": last}
    refused = refused_of(doc)
    if refused is not None:
        refused.describe()
        refused.short()
        refused_json(refused)
