"""The order in which a round serves free entries (recruiter.domain.lanes.serving_order)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from recruiter.domain.lanes import serving_order


def test_among_entries_holding_outcomes_the_longest_available_comes_first() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    entries = [
        {"_id": "new-outcome", "available_since": now, "outcome": {"job": 1}},
        {"_id": "old-free", "available_since": now - timedelta(seconds=9)},
        {"_id": "old-outcome", "available_since": now - timedelta(seconds=1), "outcome": {"job": 2}},
        {"_id": "no-date", "available_since": None},
        {"_id": "b-free", "available_since": now - timedelta(seconds=9)},
    ]
    assert [e["_id"] for e in sorted(entries, key=serving_order(now))] == [
        "old-outcome", "new-outcome", "b-free", "old-free", "no-date"]
