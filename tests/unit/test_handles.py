"""Job handles without a server: a handle is its job's id to bson, pickle and copy;
JobFailed's one line; the pure arithmetic of waiting (pending ids, deadline, backoff, the
fan-out of the shared stream)."""

from __future__ import annotations

import copy
import pickle
from datetime import UTC, datetime
from typing import Any, cast

import bson
import pytest
from bson import ObjectId
from bson.codec_options import DEFAULT_CODEC_OPTIONS

from recruiter import JobFailed, JobHandle, JobNotFound
from recruiter.domain.following import JobView, view_of
from recruiter.producer.shared_stream import Fanout, Seen, Status, SyncWatch, retry_pause_s
from recruiter.producer.waiting import FIRST_LOOK, SAFETY_READ_S, Follower, Pending, check_timeout, poll_pause_s
from recruiter.store.following import archived_pipeline

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def handle(job_id: ObjectId | None = None) -> JobHandle:
    job_id = job_id or ObjectId()
    view = view_of(job_id, {"_id": job_id, "locked": False, "scheduled_at": NOW}, None, None, NOW)
    assert view is not None
    return JobHandle(job_id, view, cast(Any, object()))  # a recruiter stand-in: never called here


def archived_view(why: str, last: dict[str, Any] | None = None, reason: str | None = None) -> JobView:
    job_id = ObjectId("65a000000000000000000001")
    doc: dict[str, Any] = {"_id": job_id, "why": why, "last_execution": last}
    if reason:
        doc["reason"] = reason
    view = view_of(job_id, None, doc, None, NOW)
    assert view is not None
    return view


def test_a_handle_is_its_id_to_bson_the_c_extension_and_pure_python_alike() -> None:
    job_id = ObjectId()
    h = handle(job_id)
    assert isinstance(h, ObjectId)
    assert h == job_id
    assert job_id == h
    assert hash(h) == hash(job_id)
    assert str(h) == str(job_id)
    assert {job_id: 1}[h] == 1
    assert h.id == job_id
    assert type(h.id) is ObjectId
    assert h.state == "queued"
    plain = {"_id": job_id, "in": [job_id], "deep": {"id": job_id}}
    wrapped = {"_id": h, "in": [h], "deep": {"id": h}}
    assert bson.has_c()  # bson.encode below runs the C extension
    assert bson.encode(wrapped) == bson.encode(plain)
    # The pure Python encoder (used where the C extension is not built) finds it by its type marker.
    pure = bson._name_value_to_bson(b"_id\x00", h, False, DEFAULT_CODEC_OPTIONS)
    assert pure == bson._name_value_to_bson(b"_id\x00", job_id, False, DEFAULT_CODEC_OPTIONS)
    decoded = bson.decode(bson.encode(wrapped))
    assert type(decoded["_id"]) is ObjectId
    assert decoded["_id"] == job_id


def test_copies_and_pickles_of_a_handle_are_plain_ids() -> None:
    h = handle()
    for other in (pickle.loads(pickle.dumps(h)), copy.copy(h), copy.deepcopy(h), copy.deepcopy({"h": h})["h"]):
        assert type(other) is ObjectId
        assert other == h
    assert repr(h) == f"JobHandle('{h}', state='queued')"


def test_job_failed_is_one_line_and_carries_the_last_execution() -> None:
    trace = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: boom\n'
    last = {"class": "builtins:ValueError", "message": "boom\nsecond line", "trace": trace}
    exc = JobFailed(archived_view("tried-too-many-times", last))
    assert str(exc) == "job 65a000000000000000000001 ended tried-too-many-times: ValueError: boom"
    assert exc.why == "tried-too-many-times"
    assert exc.execution == last
    assert exc.trace == trace
    assert exc.job_id == ObjectId("65a000000000000000000001")
    again = pickle.loads(pickle.dumps(exc))
    assert str(again) == str(exc)
    assert again.trace == trace

    cancelled = JobFailed(archived_view("cancelled"))
    assert str(cancelled) == "job 65a000000000000000000001 ended cancelled"
    assert cancelled.execution is None
    assert cancelled.trace is None
    interrupted = JobFailed(archived_view("timed-out", {"class": "app.jobs:Slow", "message": ""}, reason="over 5s"))
    assert str(interrupted) == "job 65a000000000000000000001 ended timed-out (over 5s): app.jobs:Slow"
    crashed = JobFailed(archived_view("crashed", {"message": "worker w1 died"}))
    assert str(crashed) == "job 65a000000000000000000001 ended crashed: worker w1 died"
    assert "\n" not in str(JobNotFound(ObjectId()))
    assert isinstance(JobNotFound(ObjectId()), LookupError)


def test_pending_takes_what_it_waits_for_once_and_times_out_at_its_deadline() -> None:
    a, b, c = ObjectId(), ObjectId(), ObjectId()
    pending = Pending([a, b, b, c], 2.0, now=100.0)
    assert pending.total == 3
    assert pending.waited() == [a, b, c]
    assert pending.take([{"_id": b, "why": "done"}, {"_id": ObjectId()}]) == [(b, {"_id": b, "why": "done"})]
    assert pending.take([{"_id": b}]) == []
    assert pending.gone([c, b]) == [(c, None)]
    assert pending.check(101.9) == 101.9
    assert pending.capped(5.0, 101.5) == 0.5
    assert pending.capped(0.1, 101.5) == 0.1
    with pytest.raises(TimeoutError, match=r"^1 of 3 jobs did not finish within 2s \(they were left as they are\)"):
        pending.check(102.0)
    assert pending.take([{"_id": a}]) == [(a, {"_id": a})]
    assert not pending
    assert pending.check(500.0) == 500.0  # nothing pending: no timeout
    one = Pending([a], 1, now=0.0)
    with pytest.raises(TimeoutError, match=rf"^job {a} did not finish within 1s \(it was left as it is\)$"):
        one.check(1.0)
    many = Pending([a, b], 0.5, now=0.0)
    with pytest.raises(TimeoutError, match=r"^2 of 2 jobs did not finish within 0\.5s"):
        many.check(0.5)
    forever = Pending([a], None, now=0.0)
    assert forever.check(1e9) == 1e9
    assert forever.capped(3.0, 1e9) == 3.0


def test_timeouts_backoff_and_stream_waits() -> None:
    assert check_timeout(None) is None
    assert check_timeout(0) == 0.0
    assert check_timeout(2.5) == 2.5
    for bad in (-1, float("nan"), float("inf"), "5", True):
        with pytest.raises(ValueError, match=r"^timeout must be None or a number of seconds >= 0, got"):
            check_timeout(bad)  # type: ignore[arg-type]
    assert [poll_pause_s(n) for n in range(7)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert poll_pause_s(10_000) == 1.0
    assert [retry_pause_s(n) for n in range(1, 8)] == [0.0, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6]
    assert retry_pause_s(10_000) == 2.0


def test_the_shared_stream_reports_every_archived_job_by_its_id_only() -> None:
    assert archived_pipeline() == [{"$match": {"operationType": {"$in": ["insert", "replace", "update"]}}},
                                   {"$project": {"documentKey": 1}}]


def test_the_fanout_rings_the_waits_of_each_job_and_every_wait_at_a_change_of_stream() -> None:
    a, b, c = ObjectId(), ObjectId(), ObjectId()
    fanout = Fanout()
    first, second = SyncWatch([a, b]), SyncWatch([b])
    with fanout.lock:
        fanout.add(first)
        fanout.add(second)
    assert fanout.dispatch(c) == 0
    assert fanout.dispatch({"an": ["unhashable", "_id"]}) == 0  # written by hand: rings nothing
    assert not first.bell.is_set()
    assert fanout.dispatch(b) == 2
    assert first.bell.is_set()
    assert second.bell.is_set()
    assert fanout.take(first) == Seen(frozenset({b}), 0, Status.DOWN)
    assert fanout.take(first) == Seen(frozenset(), 0, Status.DOWN)
    first.bell.clear()
    fanout.set_status(Status.OPEN)
    assert first.bell.is_set()
    assert fanout.take(second) == Seen(frozenset({b}), 1, Status.OPEN)
    fanout.remove(second)
    assert fanout.dispatch(b) == 1
    with fanout.lock:
        assert fanout.idle_for(0.0) is None
    fanout.remove(first)
    assert fanout.by_id == {}
    with fanout.lock:
        assert fanout.idle_for(fanout.idle_since + 3) == 3


def test_a_follower_reads_first_after_the_stream_opens_then_what_rings_and_all_at_each_new_stream() -> None:
    a, b = ObjectId(), ObjectId()
    pending = Pending([a, b], None, now=0.0)
    follower = Follower(pending, now=0.0)
    opening = Seen(frozenset(), 0, Status.OPENING)
    assert follower.next_read(opening, 0.1) is None  # the stream is being opened: wait for it
    assert follower.pause(opening, 0.1) == pytest.approx(0.9)
    first = Seen(frozenset(), 1, Status.OPEN)
    assert follower.next_read(first, 0.2) == FIRST_LOOK
    assert follower.next_read(first, 0.3) is None
    assert follower.pause(first, 0.3) == pytest.approx(SAFETY_READ_S - 0.1)
    assert follower.next_read(Seen(frozenset({b, ObjectId()}), 1, Status.OPEN), 0.4) == [b]
    assert follower.next_read(first, 0.2 + SAFETY_READ_S) == [a, b]  # the safety read
    reopened = Seen(frozenset(), 2, Status.OPEN)
    assert follower.next_read(reopened, 11.0) == [a, b]  # a new stream: events may have been missed
    assert follower.next_read(reopened, 11.1) is None
    down = Seen(frozenset(), 2, Status.DOWN)  # no stream: poll, backing off while nothing ends
    assert follower.next_read(down, 11.02) is None
    assert follower.next_read(down, 11.06) == [a, b]
    follower.found([a, b], [])
    assert follower.pause(down, 11.06) == pytest.approx(0.1)
    # A stream that does not open within a second: the wait reads first and polls meanwhile.
    slow = Follower(Pending([a], 5.0, now=0.0), now=0.0)
    assert slow.next_read(opening, 1.0) == FIRST_LOOK
    assert slow.pause(opening, 1.0) == pytest.approx(0.05)
    # Never past the deadline:
    assert Follower(Pending([a], 0.5, now=0.0), now=0.0).pause(opening, 0.2) == pytest.approx(0.3)


def test_a_server_without_change_streams_is_remembered_a_passing_refusal_is_not() -> None:
    from pymongo.errors import OperationFailure

    from recruiter.producer.streams import Streams
    from recruiter.store.following import StreamsRefused

    standalone = StreamsRefused(OperationFailure("The $changeStream stage is only supported on replica sets", 40573))
    assert standalone.for_good
    assert str(standalone) == "The $changeStream stage is only supported on replica sets"
    streams = Streams()
    streams.refuse(standalone)
    assert streams.refused == str(standalone)
    assert not streams.usable  # waits poll without asking again

    shutting_down = StreamsRefused(OperationFailure("interrupted at shutdown", 11600))
    assert not shutting_down.for_good
    later = Streams()
    later.refuse(shutting_down)
    assert later.usable  # the next wait tries a stream again
    assert not Streams(wanted=False).usable
