"""The pure parts of ``jobs list`` (states, filters, page tokens) and ``jobs retry`` (the copy)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import Binary, ObjectId
from hypothesis import given
from hypothesis import strategies as st

from recruiter.domain.documents import job_problem
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.domain.listing import (
    JobFilter,
    PageKey,
    decode_page_key,
    encode_page_key,
    order_key,
    parse_states,
)
from recruiter.domain.requeue import RetryRefused, retry_copy
from recruiter.retry import RetryManyTimes
from tests.workables import Record

NOW = datetime(2026, 11, 23, 3, 0, tzinfo=UTC)


def test_states_repeat_or_comma_and_unknown_ones_are_refused() -> None:
    assert parse_states(["queued,running", "archived"]) == {"queued", "running", "archived"}
    with pytest.raises(ValueError, match=r"unknown state 'done': use one of queued, delayed, retrying"):
        parse_states(["queued", "done"])


def test_why_means_archived_and_contradictions_are_refused() -> None:
    assert JobFilter.build(frozenset(), why="done").states == {"archived"}
    assert JobFilter.build(frozenset()).waiting == {"queued", "delayed", "retrying", "assigned", "running"}
    with pytest.raises(ValueError, match="--why"):
        JobFilter.build(frozenset({"queued"}), why="done")
    with pytest.raises(ValueError, match="module:Qualname"):
        JobFilter.build(frozenset(), class_name="Record")
    with pytest.raises(ValueError, match="empty"):
        JobFilter.build(frozenset(), since=NOW, until=NOW - timedelta(seconds=1))


# What the driver hands over as an _id (a UUID is read as a Binary: the client sets no uuidRepresentation).
ids = st.one_of(st.builds(ObjectId), st.text(min_size=1), st.integers(-2**63, 2**63 - 1),
                st.uuids().map(lambda u: Binary(u.bytes, 4)))


@given(ids, st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(9000, 1, 1)))
def test_page_tokens_round_trip(job_id: object, when: datetime) -> None:
    key = PageKey(when.replace(tzinfo=UTC, microsecond=when.microsecond // 1000 * 1000), job_id)
    decoded = decode_page_key(encode_page_key(key))
    assert decoded.time == key.time
    assert decoded.id == job_id


@pytest.mark.parametrize("token", ["", "abc", "!!!", encode_page_key(PageKey(NOW, 1))[:-3]])
def test_a_bad_page_token_is_one_line(token: str) -> None:
    with pytest.raises(ValueError, match="not a page token"):
        decode_page_key(token)


def test_order_key_orders_ids_of_one_type_and_of_mixed_types() -> None:
    a, b = ObjectId(), ObjectId()
    assert order_key(NOW, a) < order_key(NOW, b) < order_key(NOW + timedelta(seconds=1), a)
    assert order_key(NOW, 5) < order_key(NOW, "x") < order_key(NOW, a)  # BSON: numbers, strings, ObjectIds


def archived(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = dict(build_job_document(
        Record("mongodb://x/db", n=3),
        JobOptions(group="mail", tenant="acme", tags=("a",), retry_policy=RetryManyTimes(2), timeout_s=5,
                   at_most_once=True),
        NOW - timedelta(hours=1)))
    doc.pop("status")
    doc.update({"why": "tried-too-many-times", "archived_at": NOW, "attempts": 3, "crashes": 1, "result": None,
                "executions": [{"attempt": 1}], "last_execution": {"attempt": 3}, "done": False})
    doc.update(changes)
    return doc


def test_a_copy_is_a_new_queued_job_running_the_same_work() -> None:
    original = archived()
    copy = retry_copy(original, NOW + timedelta(minutes=1))
    assert job_problem(copy) is None
    assert copy["_id"] != original["_id"]
    assert copy["retry_of"] == original["_id"]
    for field in ("group", "tenant", "tags", "priority", "workable", "retry_policy", "timeout_s", "at_most_once"):
        assert copy[field] == original[field]  # type: ignore[literal-required]
    assert (copy["status"], copy["attempts"], copy["crashes"], copy["locked"], copy["executions"]) == (
        "queued", 0, 0, False, [])
    assert copy["created_at"] == copy["scheduled_at"] == NOW + timedelta(minutes=1)
    assert not {"why", "archived_at", "result", "last_execution"} & set(copy)


def test_quarantined_and_broken_documents_are_refused_in_one_line() -> None:
    with pytest.raises(RetryRefused, match=r"archived malformed \(status: missing\)"):
        retry_copy({"_id": 1, "why": "malformed", "reason": "status: missing"}, NOW)
    with pytest.raises(RetryRefused, match="workable"):
        retry_copy(archived(workable="nope"), NOW)
    with pytest.raises(RetryRefused, match="group"):
        retry_copy(archived(group=7), NOW)
