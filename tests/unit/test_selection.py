"""Choosing jobs for free workers: examples and properties of the pure selection."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recruiter.domain.selection import (
    ANY_GROUP,
    DEFAULT_SCHEME,
    Assignment,
    Candidate,
    CountingScheme,
    Cursor,
    FreeWorker,
    Selection,
    select,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(hours=1)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def job(job_id: Any, group: str = "a", seconds: int = 0, tenant: str = "", priority: str = "low",
        retrying: bool = False) -> Candidate:
    return Candidate(job_id, group, at(seconds), tenant, priority, retrying)


def run(workers: list[FreeWorker], jobs: list[Candidate], cursor: Cursor | None = None,
        scheme: CountingScheme = DEFAULT_SCHEME) -> Selection:
    return select(workers, jobs, cursor or Cursor(), NOW, scheme)


def as_map(selection: Selection) -> dict[str, Any]:
    return {a.worker_id: a.job_id for a in selection.assignments}


def order(selection: Selection) -> list[Any]:
    return [a.job_id for a in selection.assignments]


def workers_of(n: int, *groups: str) -> list[FreeWorker]:
    return [FreeWorker(f"w{i}", groups or (ANY_GROUP,)) for i in range(n)]


# -- examples ------------------------------------------------------------------------


def test_nothing_to_do() -> None:
    assert run([], [job(1)]).assignments == []
    assert run([FreeWorker("w", ("a",))], []).assignments == []


def test_fifo_by_scheduled_at_then_id() -> None:
    jobs = [job("late", seconds=30), job("early", seconds=10), job("b", seconds=20), job("a", seconds=20)]
    assert order(run(workers_of(3, "a"), jobs)) == ["early", "a", "b"]


def test_jobs_not_due_are_not_assigned() -> None:
    future = Candidate("f", "a", NOW + timedelta(seconds=1))
    assert run(workers_of(1, "a"), [future]).assignments == []


def test_duplicate_candidates_count_once() -> None:
    same = job(1)
    assert run(workers_of(2, "a"), [same, same, same]).assignments == [Assignment("w0", 1)]


def test_worker_only_gets_its_groups() -> None:
    workers = [FreeWorker("wa", ("a",)), FreeWorker("wb", ("b",))]
    jobs = [job("c1", "c"), job("b1", "b", 1), job("a1", "a", 2)]
    assert as_map(run(workers, jobs)) == {"wa": "a1", "wb": "b1"}


def test_bound_workers_choose_first() -> None:
    # Had the '*' worker taken "a1", the 'a' worker would idle while "b1" waits.
    workers = [FreeWorker("any", (ANY_GROUP,)), FreeWorker("wa", ("a",))]
    assert as_map(run(workers, [job("a1", "a", 0), job("b1", "b", 1)])) == {"wa": "a1", "any": "b1"}


def test_tenants_are_served_round_robin() -> None:
    jobs = [job(f"A{i}", seconds=i, tenant="A") for i in range(10)] + [job("B0", seconds=50, tenant="B"),
                                                                         job("B1", seconds=51, tenant="B")]
    first = run(workers_of(3), jobs)
    assert order(first) == ["A0", "B0", "A1"]
    assert first.cursor.last_tenant == {"a": "A"}
    assert first.cursor.last_group == "a"
    # The next round goes on from where this one stopped: B's turn.
    left = [j for j in jobs if j.id not in order(first)]
    assert order(run(workers_of(3), left, first.cursor)) == ["B1", "A2", "A3"]


def test_jobs_without_tenant_share_the_default_tenant() -> None:
    jobs = [job("n0", seconds=0), job("n1", seconds=1), job("x0", seconds=5, tenant="x")]
    selection = run(workers_of(2), jobs)
    assert order(selection) == ["n0", "x0"]
    assert selection.cursor.last_tenant == {"a": "x"}


def test_due_retrying_jobs_go_first() -> None:
    jobs = [job("fresh-high", seconds=0, priority="high"), job("retry-low", seconds=30, retrying=True),
            job("retry-high", seconds=40, priority="high", retrying=True)]
    assert order(run(workers_of(3), jobs)) == ["retry-high", "retry-low", "fresh-high"]


def test_counting_scheme_picks_the_priority() -> None:
    jobs = [job(f"h{i}", seconds=i, priority="high") for i in range(10)] + [
        job(f"l{i}", seconds=i, priority="low") for i in range(10)]
    assert order(run(workers_of(7), jobs)) == ["h0", "h1", "h2", "h3", "l0", "h4", "h5"]
    assert order(run(workers_of(4), jobs, scheme=CountingScheme(1, 2))) == ["h0", "l0", "l1", "h1"]
    # The position in the scheme is part of the cursor.
    mid = run(workers_of(2), jobs)
    assert mid.cursor.counts == {("a", ""): 2}
    assert order(run(workers_of(3), jobs[2:], mid.cursor)) == ["h2", "h3", "l0"]


def test_counting_scheme_falls_back_without_advancing() -> None:
    lows = [job(f"l{i}", seconds=i) for i in range(3)]
    selection = run(workers_of(3), lows)
    assert order(selection) == ["l0", "l1", "l2"]
    assert selection.cursor.counts == {}  # nothing to write back
    highs = [job(f"h{i}", seconds=i, priority="high") for i in range(3)]
    assert order(run(workers_of(3), highs, Cursor(counts={("a", ""): 4}))) == ["h0", "h1", "h2"]


def test_a_shared_worker_alternates_between_groups() -> None:
    busy = [job(f"b{i}", "busy", seconds=i) for i in range(20)]
    quiet = [job(f"q{i}", "quiet", seconds=100 + i) for i in range(2)]
    workers = [FreeWorker("w", ("busy", "quiet"))]
    cursor, served = Cursor(), []
    left = busy + quiet
    for _ in range(4):
        selection = run(workers, left, cursor)
        cursor = selection.cursor
        served += order(selection)
        left = [j for j in left if j.id not in served]
    assert served == ["b0", "q0", "b1", "q1"]


def test_counting_scheme_parsing() -> None:
    assert CountingScheme.parse("4,1") == CountingScheme(4, 1)
    assert CountingScheme.parse(" 2 , 3 ") == CountingScheme(2, 3)
    assert str(CountingScheme.parse("0,1")) == "0,1"
    for bad in ("", "4", "4,1,1", "a,b", "-1,2", "0,0"):
        with pytest.raises(ValueError, match="counting scheme"):
            CountingScheme.parse(bad)


# -- properties ---------------------------------------------------------------------------

GROUPS = ["a", "b", "c"]
TENANTS = ["", "t1", "t2", "t3"]


@st.composite
def scenarios(draw: Any) -> tuple[list[FreeWorker], list[Candidate], Cursor, CountingScheme]:
    n_workers = draw(st.integers(min_value=0, max_value=8))
    workers = [
        FreeWorker(f"w{i}", tuple(draw(st.lists(st.sampled_from([*GROUPS, ANY_GROUP]), min_size=1, max_size=3,
                                                 unique=True))))
        for i in range(n_workers)
    ]
    n_jobs = draw(st.integers(min_value=0, max_value=25))
    jobs = [
        Candidate(f"j{i:02d}", draw(st.sampled_from(GROUPS)), NOW + timedelta(seconds=draw(st.integers(-5, 2))),
                  draw(st.sampled_from(TENANTS)), draw(st.sampled_from(["high", "low"])), draw(st.booleans()))
        for i in range(n_jobs)
    ]
    cursor = Cursor(
        draw(st.none() | st.sampled_from(GROUPS)),
        draw(st.dictionaries(st.sampled_from(GROUPS), st.sampled_from(TENANTS))),
        draw(st.dictionaries(st.tuples(st.sampled_from(GROUPS), st.sampled_from(TENANTS)), st.integers(1, 4))),
    )
    scheme = CountingScheme(draw(st.integers(0, 4)), draw(st.integers(0, 3)) or 1)
    return workers, jobs, cursor, scheme


def check_selection(workers: list[FreeWorker], jobs: list[Candidate], selection: Selection) -> None:
    by_id = {c.id: c for c in jobs}
    by_worker = {w.id: w for w in workers}
    assignments = selection.assignments
    assert all(n == 1 for n in Counter(a.job_id for a in assignments).values()), "a job was given twice"
    assert len({a.worker_id for a in assignments}) == len(assignments), "a worker got two jobs"
    for a in assignments:
        assert by_id[a.job_id].scheduled_at <= NOW, "a job that is not due was assigned"
        assert by_worker[a.worker_id].takes(by_id[a.job_id].group), "a worker got a job outside its groups"
    taken = {a.job_id for a in assignments}
    left = [c for c in jobs if c.id not in taken and c.scheduled_at <= NOW]
    served = {a.worker_id for a in assignments}
    for w in workers:
        if w.id not in served:
            assert not any(w.takes(c.group) for c in left), f"{w} idle while a matching job waits"
    for a in assignments:
        mine = by_id[a.job_id]
        same = [c for c in left if (c.group, c.tenant) == (mine.group, mine.tenant)]
        if not mine.retrying:
            assert not any(c.retrying for c in same), "a fresh job went before a due retrying one"
        # FIFO within its stream: nothing older of the same kind was skipped.
        assert not any(c.stream == mine.stream and c.order < mine.order for c in same)


@settings(max_examples=500, deadline=None)
@given(scenarios())
def test_select_properties(data: tuple[list[FreeWorker], list[Candidate], Cursor, CountingScheme]) -> None:
    workers, jobs, cursor, scheme = data
    check_selection(workers, jobs, select(workers, jobs, cursor, NOW, scheme))


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.randoms(use_true_random=False))
def test_select_ignores_candidate_order(data: tuple[list[FreeWorker], list[Candidate], Cursor, CountingScheme],
                                        rnd: Any) -> None:
    workers, jobs, cursor, scheme = data
    shuffled = list(jobs)
    rnd.shuffle(shuffled)
    assert select(workers, shuffled, cursor, NOW, scheme) == select(workers, jobs, cursor, NOW, scheme)


def long_run(workers_per_round: list[list[FreeWorker]], jobs: list[Candidate],
             scheme: CountingScheme = DEFAULT_SCHEME) -> list[Candidate]:
    """Rounds in a row, the cursor carried over; returns the jobs in the order served."""
    by_id = {c.id: c for c in jobs}
    left, cursor, served = dict(by_id), Cursor(), []
    for workers in workers_per_round:
        selection = select(workers, left.values(), cursor, NOW, scheme)
        cursor = selection.cursor
        for a in selection.assignments:
            served.append(left.pop(a.job_id))
    return served


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 6), st.lists(st.integers(1, 8), min_size=1, max_size=30), st.randoms(use_true_random=False))
def test_each_tenant_gets_a_share_within_one_of_equal(n_tenants: int, round_sizes: list[int], rnd: Any) -> None:
    tenants = ["", *(f"t{i}" for i in range(1, n_tenants))]
    total = sum(round_sizes)
    # Every tenant has more ready jobs than the whole run can serve, in random order of age.
    jobs = [Candidate(f"{t}-{i}", "a", NOW - timedelta(seconds=rnd.randint(1, 10_000)), t,
                      rnd.choice(["high", "low"]), rnd.random() < 0.1)
            for t in tenants for i in range(total + 1)]
    served = long_run([workers_of(n, "a") for n in round_sizes], jobs)
    shares = Counter(c.tenant for c in served)
    counts = [shares.get(t, 0) for t in tenants]
    assert max(counts) - min(counts) <= 1, shares


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=30))
def test_shared_workers_give_each_group_a_share_within_one(round_sizes: list[int]) -> None:
    total = sum(round_sizes)
    jobs = [Candidate(f"{g}-{i}", g, NOW - timedelta(seconds=i), "", "low") for g in GROUPS
            for i in range(total + 1)]
    served = long_run([workers_of(n) for n in round_sizes], jobs)
    counts = [sum(1 for c in served if c.group == g) for g in GROUPS]
    assert max(counts) - min(counts) <= 1, counts


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 5), st.integers(0, 5), st.lists(st.integers(1, 8), min_size=1, max_size=20))
def test_high_low_ratio_follows_the_scheme(high: int, low: int, round_sizes: list[int]) -> None:
    if high + low == 0:
        return
    scheme = CountingScheme(high, low)
    total = sum(round_sizes)
    jobs = [Candidate(f"{p}{i}", "a", NOW - timedelta(seconds=i), "acme", p) for p in ("high", "low")
            for i in range(total + 1)]
    served = long_run([workers_of(n, "a") for n in round_sizes], jobs, scheme)
    period = high + low
    for n in range(1, len(served) + 1):
        highs = sum(1 for c in served[:n] if c.priority == "high")
        assert highs == (n // period) * high + min(n % period, high)
