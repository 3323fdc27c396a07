"""The start gate's pure parts (recruiter.domain.start_gate): the gate of a rate, the gates a copy
names (untrusted), and when a full window frees."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from recruiter.domain.pacing import Rate
from recruiter.domain.start_gate import MAX_ENTRIES, Gate, free_at, gate_of, gates_for, read_spec, reply_of

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(("rate", "burst", "entries", "window_ms"), [
    ("5/s", 0, 5, 1000),
    ("5/s", 4, 9, 1000),           # N + B per interval, as the bucket allows
    ("3/10s", 0, 3, 10000),
    ("1000/h", 0, 100, 360000),    # 100 per 6 minutes: 1000 per hour, a log of 100
    ("1009/h", 0, 1, 3568),        # a prime: one start per interval / N, rounded up to the millisecond
])
def test_a_rate_gives_its_gate(rate: str, burst: int, entries: int, window_ms: int) -> None:
    gate = gate_of(("g", None), Rate.parse(rate, burst))
    assert (gate.entries, gate.window_ms) == (entries, window_ms)
    assert gate.entries <= MAX_ENTRIES


def test_a_job_takes_the_gate_of_each_rate_it_counts_against() -> None:
    rates = {("g", None): Rate.parse("5/s"), ("g", "acme"): Rate.parse("2/s")}
    gates = gates_for([("g", None), ("g", "acme")], rates)
    assert [g.path for g in gates] == ["s", "tenants.acme"]
    assert gates_for([("h", None), ("h", "")], rates) == []


@pytest.mark.parametrize("raw", [None, [], "x", [["g", None, 0, 1000]], [["g", None, "5", 1000]],
                                 [["g", None, 5]], [["g", None, 5, 1000], ["h", None, 5, 1000]],
                                 [["g", None, 5, 1000], ["g", None, 5, 1000]], [["g", 3, 5, 1000]],
                                 [["g", None, MAX_ENTRIES + 1, 1000]], [["g", None, True, 1000]]])
def test_malformed_gates_are_refused_with_a_reason(raw: object) -> None:
    gates, problem = read_spec(raw)
    assert gates == []
    assert problem is not None
    assert problem.startswith("start_gate")


def test_well_formed_gates_are_read() -> None:
    gates, problem = read_spec([["g", None, 5, 1000], ["g", "acme", 2, 1000]])
    assert problem is None
    assert gates == [Gate("g", None, 5, 1000), Gate("g", "acme", 2, 1000)]


def test_a_full_window_frees_when_its_oldest_start_leaves_it() -> None:
    gate = Gate("g", None, 3, 1000)
    at = [T0 + timedelta(milliseconds=ms) for ms in (0, 100, 200, 900)]
    assert free_at(at[:2], gate, T0 + timedelta(milliseconds=300)) == T0 + timedelta(milliseconds=300)
    # 100, 200 and 900 lie in the window ending at 950: free once 100 leaves it, at 1100.
    assert free_at(at, gate, T0 + timedelta(milliseconds=950)) == T0 + timedelta(milliseconds=1100)
    # Order does not matter (a hand edit), and starts out of the window do not count.
    assert free_at(list(reversed(at)), gate, T0 + timedelta(milliseconds=950)) == T0 + timedelta(milliseconds=1100)


def test_a_reply_is_read_only_from_its_own_write() -> None:
    gate = Gate("g", None, 1, 1000)
    doc = {"last": {"at": T0, "by": "n1", "granted": False, "problem": None}, "s": [T0 - timedelta(milliseconds=400)]}
    reply = reply_of(doc, [gate], "n1")
    assert reply is not None
    assert not reply.granted
    assert reply.free_at == T0 + timedelta(milliseconds=600)
    assert reply_of(doc, [gate], "n2") is None
    assert reply_of(None, [gate], "n1") is None
    assert reply_of({"last": "x"}, [gate], "n1") is None
