"""Heartbeats are plain writes: no retryable-write record on the server for each beat."""

from __future__ import annotations

from typing import Any

import pytest

from bench.commands import Commands
from recruiter.store import heartbeats
from recruiter.store.connection import heartbeat_client, parse_target, sync_client


def test_a_beat_carries_no_transaction_number_where_other_writes_do(db_uri: str, db: Any) -> None:
    target = parse_target(db_uri)
    db.heartbeats.insert_one({"_id": "w1", "session": "s1"})
    beats = [("w1", "s1", {"last_seen_at": 1}), ("w2", "s2", {"last_seen_at": 1})]

    ordinary_seen, beat_seen = Commands(), Commands()
    ordinary = sync_client(target, event_listeners=[ordinary_seen])
    beating = heartbeat_client(target, app_name="test-heartbeat", event_listeners=[beat_seen])
    try:
        heartbeats.write_beats(ordinary[target.database].heartbeats, beats)
        if "txnNumber" not in ordinary_seen.named("update", "heartbeats")[0]:
            pytest.skip("this server takes no retryable writes (a standalone mongod)")
        heartbeats.write_beats(beating[target.database].heartbeats, [("w1", "s1", {"last_seen_at": 2})])
    finally:
        ordinary.close()
        beating.close()

    sent = beat_seen.named("update", "heartbeats")
    assert len(sent) == 1
    assert "txnNumber" not in sent[0]
    assert db.heartbeats.find_one({"_id": "w1"})["last_seen_at"] == 2  # the beat landed, fenced as before
    assert db.heartbeats.count_documents({"_id": "w2"}) == 0  # a beat never creates a document
