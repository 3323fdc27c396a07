"""A worker process's heartbeat document, read as one beat per roster entry (no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from bson import ObjectId

from recruiter.domain.liveness import (
    FROM_PROCESS,
    expand_beats,
    heartbeat_document,
    is_fresh,
    malformed_process_docs,
    pick_beats,
    process_document,
    slot_document,
    slot_key,
)
from recruiter.processes.worker.heartbeat import SlotView, process_beat_fields

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def process(token: ObjectId, *slots: tuple[str, ObjectId], seen: datetime = NOW) -> dict[str, Any]:
    doc: dict[str, Any] = {"_id": token, **process_document(str(token), seen, 1.0, 7, "h", "@worker:W")}
    doc["slots"] = {slot_key(i): slot_document(i, s) for i, s in slots}
    doc["ids"] = [i for i, _ in slots]
    return doc


def test_a_process_document_gives_each_of_its_entries_a_beat_with_its_own_session() -> None:
    token, s0, s1 = ObjectId(), ObjectId(), ObjectId()
    beats = pick_beats(expand_beats([process(token, ("W-0", s0), ("W-0~1", s1))]))
    assert set(beats) == {"W-0", "W-0~1"}
    assert beats["W-0~1"]["session"] == s1
    assert beats["W-0"][FROM_PROCESS] == token
    assert beats["W-0"]["worker_group"] == "@worker:W"
    assert is_fresh(beats["W-0"], {"_id": "W-0", "session": s0}, NOW)
    assert not is_fresh(beats["W-0"], {"_id": "W-0", "session": s1}, NOW)  # another registration's
    assert not is_fresh(beats["W-0"], {"_id": "W-0", "session": s0}, NOW + timedelta(seconds=3))


def test_ids_with_dots_and_dollars_are_escaped_as_keys_and_read_back() -> None:
    assert slot_key("a.b$c%d~1") == "a%2Eb%24c%25d~1"
    assert "." not in slot_key("x.y") and "$" not in slot_key("$x")  # noqa: PT018
    view = SlotView("a.b-0~1", ObjectId(), None, None)
    fields = process_beat_fields([view], NOW, 1.0)
    assert list(fields["slots"]) == ["a%2Eb-0~1"]
    assert fields["ids"] == ["a.b-0~1"]
    doc = {"_id": ObjectId(), "kind": "process", "last_seen_at": NOW, **fields}
    assert [b["_id"] for b in expand_beats([doc])] == ["a.b-0~1"]


def test_malformed_documents_name_no_entry_and_never_raise() -> None:
    token = ObjectId()
    docs: list[dict[str, Any]] = [
        {"_id": token, "kind": "process", "slots": "nope", "last_seen_at": NOW},
        {"_id": ObjectId(), "kind": "process", "slots": {"W": {"id": "V"}, "X": 5, "Y": {"id": 3}},
         "last_seen_at": NOW},
        {"_id": ObjectId(), "kind": "process", "slots": {}, "last_seen_at": "yesterday"},
        {"_id": 12, "session": "s"},  # an older document with an _id no entry has
    ]
    assert expand_beats(docs) == []
    assert malformed_process_docs(docs) == [token, docs[2]["_id"]]


def test_an_entry_picks_the_beat_with_its_session_else_the_latest() -> None:
    old, new, mine = ObjectId(), ObjectId(), ObjectId()
    dead = process(ObjectId(), ("W", old), seen=NOW - timedelta(minutes=5))
    live = process(ObjectId(), ("W", mine), seen=NOW - timedelta(minutes=9))
    legacy = heartbeat_document("W", new, NOW, 1.0, 7, "h")
    beats = expand_beats([dead, live, legacy])
    assert pick_beats(beats, {"W": {"_id": "W", "session": mine}})["W"]["session"] == mine
    assert pick_beats(beats)["W"]["session"] == new  # no entry given: the latest seen
