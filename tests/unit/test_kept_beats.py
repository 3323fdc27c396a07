"""One read of a worker process's beat serves every entry the leader keeps from that process
(recruiter.processes.roster_view.RosterView.extend_beats): a beat is the whole process's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from bson import ObjectId

from recruiter.domain.liveness import FROM_PROCESS
from recruiter.processes.roster_view import RosterView

T0 = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
P, Q = ObjectId(), ObjectId()


def _beat(entry: str, process: object, at: datetime, session: object = "s") -> dict[str, Any]:
    return {"_id": entry, "session": session, "last_seen_at": at, "fresh_until": at + timedelta(seconds=15),
            FROM_PROCESS: process}


def test_a_process_beat_read_for_one_entry_extends_the_others_of_that_process_only() -> None:
    view = RosterView()
    view.beats = {"p1": _beat("p1", P, T0, "a"), "p2": _beat("p2", P, T0, "b"), "q1": _beat("q1", Q, T0)}
    later = T0 + timedelta(seconds=12)
    view.extend_beats([_beat("p1", P, later, "a")])
    assert view.beats["p2"]["fresh_until"] == later + timedelta(seconds=15)
    assert view.beats["p2"]["last_seen_at"] == later
    assert view.beats["p2"]["session"] == "b"  # its own session, as read for it
    assert view.beats["q1"]["fresh_until"] == T0 + timedelta(seconds=15)  # another process
    entry = {"_id": "p2", "session": "b"}
    assert not view.needs_beat(entry, T0 + timedelta(seconds=20))  # past its own read, within the process's
    assert view.needs_beat(entry, later + timedelta(seconds=15))


def test_an_older_or_malformed_beat_extends_nothing() -> None:
    view = RosterView()
    view.beats = {"p1": _beat("p1", P, T0), "own": {**_beat("own", P, T0)}}
    del view.beats["own"][FROM_PROCESS]  # an older version's document of one entry
    view.extend_beats([_beat("x", P, T0 - timedelta(seconds=5))])  # older than what is kept
    assert view.beats["p1"]["fresh_until"] == T0 + timedelta(seconds=15)
    view.extend_beats([{**_beat("x", P, T0 + timedelta(seconds=5)), "fresh_until": "soon"}])  # not a date
    view.extend_beats([{k: v for k, v in _beat("x", P, T0 + timedelta(seconds=5)).items() if k != FROM_PROCESS}])
    assert view.beats["p1"]["fresh_until"] == T0 + timedelta(seconds=15)
    view.extend_beats([_beat("x", P, T0 + timedelta(seconds=5))])
    assert view.beats["p1"]["fresh_until"] == T0 + timedelta(seconds=20)
    assert view.beats["own"]["fresh_until"] == T0 + timedelta(seconds=15)  # not from a process document
