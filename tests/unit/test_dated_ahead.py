"""Dates stored far in the future are malformed, not trusted for ever (recruiter.domain.clock.MAX_AHEAD).

A heartbeat, a rate-limit bucket or a lease dated in year 9999 (a hand edit, a host whose clock is
years off) would otherwise keep a dead worker live, a rate limit empty, or every leader standing by,
until that date. A date a little ahead (clocks disagree) is still believed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import ObjectId

from recruiter.domain.clock import MAX_AHEAD
from recruiter.domain.liveness import (
    MAX_FRESH_AHEAD,
    dated_ahead,
    heartbeat_document,
    is_dead,
    is_fresh,
    missed_beats,
)
from recruiter.domain.pacing import Bucket, LimitState, Rate, state_document, state_from
from recruiter.processes.recruiter import RecruiterConfig
from recruiter.store.leases import MAX_EXPIRY_AHEAD, MAX_TTL, Lease, expiry_ahead

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
Y9999 = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
SESSION = ObjectId()
ENTRY = {"_id": "w1", "session": SESSION, "pid": 7, "hostname": "h"}


def beat(seen: datetime, until: datetime | None = None, interval_s: float = 1.0) -> dict[str, Any]:
    """A slot's beat last seen at ``seen``, fresh until ``until`` (else as a worker would write it)."""
    doc = heartbeat_document("w1", SESSION, NOW, interval_s, 7, "h")
    doc["last_seen_at"] = seen
    doc["fresh_until"] = until or min(Y9999, seen + timedelta(seconds=2 * interval_s))
    return doc


# -- heartbeats ------------------------------------------------------------------------------


def test_a_beat_an_hour_ahead_is_live_clocks_disagree_but_not_one_past_the_bound() -> None:
    ahead = beat(NOW + timedelta(hours=1))
    assert dated_ahead(ahead, NOW) is None
    assert is_fresh(ahead, ENTRY, NOW)
    assert not missed_beats(ahead, NOW)
    assert not is_dead(ahead, NOW, 30.0)
    too_far = beat(NOW + MAX_AHEAD + timedelta(seconds=1))
    assert not is_fresh(too_far, ENTRY, NOW)
    assert "last_seen_at" in (dated_ahead(too_far, NOW) or "")


@pytest.mark.parametrize(("seen", "until"), [
    (Y9999, Y9999),  # the audit's ghost worker
    (NOW + MAX_AHEAD + timedelta(seconds=1), None),  # just past the bound: fresh_until follows it
    (NOW, Y9999),  # seen now, but "fresh" until year 9999
    (NOW, NOW + MAX_FRESH_AHEAD + timedelta(seconds=1)),
])
def test_a_beat_dated_too_far_ahead_is_malformed_never_fresh_and_its_worker_silent_and_dead(
        seen: datetime, until: datetime | None) -> None:
    b = beat(seen, until)
    assert dated_ahead(b, NOW) is not None
    assert not is_fresh(b, ENTRY, NOW)
    assert missed_beats(b, NOW)  # a job it holds is taken back by the next round or cleaner pass
    assert is_dead(b, NOW, 30.0)  # the cleaner removes the entry


# -- rate-limit buckets ----------------------------------------------------------------------


def test_a_bucket_dated_too_far_ahead_is_set_aside_and_the_limit_starts_afresh() -> None:
    rate = Rate.parse("1000/s", burst=5)
    stored = {"limiter": {"groups": {"bench": {"t": 0.0, "at": Y9999}}, "tenants": {}}}
    state, problem = state_from(stored, NOW)
    assert problem is not None
    assert "limiter.groups.bench.at" in problem
    assert state.bucket(("bench", None), rate, NOW).tokens == 0  # no unearned burst
    assert state.bucket(("bench", None), rate, NOW + timedelta(seconds=1)).tokens == rate.capacity  # refills

    tenant = {"limiter": {"groups": {}, "tenants": {"bench": {"acme": {"t": 0.0, "at": Y9999}}}}}
    assert "limiter.tenants.bench.acme.at" in (state_from(tenant, NOW)[1] or "")
    kept = LimitState({("bench", None): Bucket(0.5, NOW + timedelta(hours=1))})  # a little ahead: kept
    assert state_from({"limiter": state_document(kept)}, NOW) == (kept, None)


# -- leases ----------------------------------------------------------------------------------


def test_a_lease_expiry_past_the_longest_ttl_and_the_clock_allowance_is_not_believed() -> None:
    assert MAX_EXPIRY_AHEAD == MAX_TTL + MAX_AHEAD
    assert expiry_ahead(Y9999, NOW)
    assert expiry_ahead(NOW + MAX_EXPIRY_AHEAD + timedelta(seconds=1), NOW)
    assert not expiry_ahead(NOW + MAX_TTL + timedelta(hours=1), NOW)  # a long lease, a skewed clock
    assert not expiry_ahead("never", NOW)  # not a date: the lease's own rule (no expiry) applies


def test_no_lease_is_taken_for_longer_than_the_longest_ttl() -> None:
    with pytest.raises(ValueError, match="lease ttl"):
        Lease(None, "recruiter", "me", MAX_TTL + timedelta(seconds=1), None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lease ttl"):
        RecruiterConfig(lease_ttl_s=MAX_TTL.total_seconds() + 1)
    assert RecruiterConfig(lease_ttl_s=MAX_TTL.total_seconds()).lease_ttl_s == MAX_TTL.total_seconds()
