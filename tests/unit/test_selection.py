"""Choosing jobs for free workers: examples and properties of the pure selection."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from recruiter.selection import ANY_GROUP, Assignment, Candidate, FreeWorker, candidate_queries, select

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def job(job_id: Any, group: str, seconds: int) -> Candidate:
    return Candidate(job_id, group, at(seconds))


def as_map(assignments: list[Assignment]) -> dict[str, Any]:
    return {a.worker_id: a.job_id for a in assignments}


# -- examples ------------------------------------------------------------------------


def test_nothing_to_do() -> None:
    assert select([], [job(1, "a", 0)]) == []
    assert select([FreeWorker("w", ("a",))], []) == []


def test_fifo_by_scheduled_at() -> None:
    workers = [FreeWorker("w1", ("a",)), FreeWorker("w2", ("a",))]
    jobs = [job("late", "a", 30), job("early", "a", 10), job("middle", "a", 20)]
    assert as_map(select(workers, jobs)) == {"w1": "early", "w2": "middle"}


def test_equal_times_are_ordered_by_id() -> None:
    workers = [FreeWorker("w1", ("a",))]
    assert as_map(select(workers, [job("b", "a", 0), job("a", "a", 0)])) == {"w1": "a"}


def test_each_job_is_assigned_at_most_once() -> None:
    workers = [FreeWorker(f"w{i}", ("a",)) for i in range(5)]
    assignments = select(workers, [job(1, "a", 0), job(2, "a", 1)])
    assert sorted(a.job_id for a in assignments) == [1, 2]
    assert len({a.worker_id for a in assignments}) == 2


def test_duplicate_candidates_count_once() -> None:
    workers = [FreeWorker("w1", ("a",)), FreeWorker("w2", ("a",))]
    same = job(1, "a", 0)
    assert select(workers, [same, same, same]) == [Assignment("w1", 1)]


def test_worker_only_gets_its_groups() -> None:
    workers = [FreeWorker("wa", ("a",)), FreeWorker("wb", ("b",))]
    jobs = [job("c1", "c", 0), job("b1", "b", 1), job("a1", "a", 2)]
    assert as_map(select(workers, jobs)) == {"wa": "a1", "wb": "b1"}


def test_worker_with_several_groups() -> None:
    workers = [FreeWorker("wab", ("a", "b"))]
    jobs = [job("a1", "a", 5), job("b1", "b", 3), job("c1", "c", 0)]
    assert as_map(select(workers, jobs)) == {"wab": "b1"}


def test_star_worker_takes_any_group() -> None:
    workers = [FreeWorker("any", (ANY_GROUP,))]
    jobs = [job("x1", "x", 2), job("y1", "y", 1)]
    assert as_map(select(workers, jobs)) == {"any": "y1"}
    assert FreeWorker("any", (ANY_GROUP,)).takes("whatever")
    assert not FreeWorker("a", ("a",)).takes("b")


def test_bound_workers_choose_first() -> None:
    # The '*' worker comes first and "a1" is the oldest job; had it chosen first it
    # would take "a1", leaving the 'a' worker idle while "b1" waits.
    workers = [FreeWorker("any", (ANY_GROUP,)), FreeWorker("wa", ("a",))]
    jobs = [job("a1", "a", 0), job("b1", "b", 1)]
    assert as_map(select(workers, jobs)) == {"wa": "a1", "any": "b1"}


def test_bound_worker_is_not_starved_by_star_worker() -> None:
    workers = [FreeWorker("any", (ANY_GROUP,)), FreeWorker("wa", ("a",))]
    assert as_map(select(workers, [job("a1", "a", 0)])) == {"wa": "a1"}


def test_candidates_may_be_any_iterable() -> None:
    workers = [FreeWorker("w", ("a",))]
    assert as_map(select(workers, (c for c in [job(1, "a", 0)]))) == {"w": 1}


# -- candidate queries ------------------------------------------------------------------


def test_candidate_queries_no_workers() -> None:
    assert candidate_queries([], T0) == []


def test_candidate_queries_one_per_named_group_plus_star() -> None:
    workers = [
        FreeWorker("w1", ("b",)),
        FreeWorker("w2", ("a", "b")),
        FreeWorker("w3", (ANY_GROUP,)),
        FreeWorker("w4", ("a",)),
    ]
    queries = candidate_queries(workers, T0)
    ready = {"locked": False, "scheduled_at": {"$lte": T0}}
    assert queries == [
        (ready, 4),
        ({**ready, "group": "a"}, 4),
        ({**ready, "group": "b"}, 4),
    ]


def test_candidate_queries_without_star_workers() -> None:
    queries = candidate_queries([FreeWorker("w1", ("a",)), FreeWorker("w2", ("a",))], T0)
    assert queries == [({"locked": False, "scheduled_at": {"$lte": T0}, "group": "a"}, 2)]


def test_candidate_queries_only_star_workers() -> None:
    queries = candidate_queries([FreeWorker("w1", (ANY_GROUP,))], T0)
    assert queries == [({"locked": False, "scheduled_at": {"$lte": T0}}, 1)]


def test_candidate_query_filters_are_independent() -> None:
    queries = candidate_queries([FreeWorker("w", (ANY_GROUP, "a"))], T0)
    queries[0][0]["extra"] = 1
    assert "extra" not in queries[1][0]


# -- properties ---------------------------------------------------------------------------

GROUPS = ["a", "b", "c"]


@st.composite
def workers_and_candidates(draw: Any, unique_times: bool = False) -> tuple[list[FreeWorker], list[Candidate]]:
    n_workers = draw(st.integers(min_value=0, max_value=8))
    workers = [
        FreeWorker(
            f"w{i}",
            tuple(draw(st.lists(st.sampled_from([*GROUPS, ANY_GROUP]), min_size=1, max_size=3, unique=True))),
        )
        for i in range(n_workers)
    ]
    n_jobs = draw(st.integers(min_value=0, max_value=15))
    if unique_times:
        times = draw(st.lists(st.integers(min_value=-100, max_value=100), min_size=n_jobs,
                              max_size=n_jobs, unique=True))
    else:
        times = draw(st.lists(st.integers(min_value=-5, max_value=5), min_size=n_jobs, max_size=n_jobs))
    candidates = [Candidate(f"j{i:02d}", draw(st.sampled_from(GROUPS)), at(t)) for i, t in enumerate(times)]
    return workers, candidates


def _key(c: Candidate) -> tuple[datetime, str]:
    return c.scheduled_at, str(c.id)


def check_select(workers: list[FreeWorker], candidates: list[Candidate], assignments: list[Assignment]) -> None:
    by_id = {c.id: c for c in candidates}
    by_worker = {w.id: w for w in workers}
    jobs = Counter(a.job_id for a in assignments)
    assert all(n == 1 for n in jobs.values()), "a job was given twice"
    assert len({a.worker_id for a in assignments}) == len(assignments), "a worker got two jobs"
    for a in assignments:
        assert a.job_id in by_id and a.worker_id in by_worker
        assert by_worker[a.worker_id].takes(by_id[a.job_id].group), "a worker got a job outside its groups"
    left = [c for c in candidates if c.id not in jobs]
    served = {a.worker_id for a in assignments}
    for w in workers:
        if w.id not in served:
            # Maximal: an idle worker has nothing left that it could have run.
            assert not any(w.takes(c.group) for c in left), f"{w} idle while a matching job waits"
    for a in assignments:
        # FIFO: nothing older that this worker could run was skipped.
        mine = by_id[a.job_id]
        w = by_worker[a.worker_id]
        assert not any(w.takes(c.group) and _key(c) < _key(mine) for c in left)


@settings(max_examples=400, deadline=None)
@given(workers_and_candidates())
def test_select_properties(data: tuple[list[FreeWorker], list[Candidate]]) -> None:
    workers, candidates = data
    check_select(workers, candidates, select(workers, candidates))


@settings(max_examples=200, deadline=None)
@given(workers_and_candidates(), st.randoms(use_true_random=False))
def test_select_ignores_candidate_order(data: tuple[list[FreeWorker], list[Candidate]], rnd: Any) -> None:
    workers, candidates = data
    shuffled = list(candidates)
    rnd.shuffle(shuffled)
    assert select(workers, shuffled) == select(workers, candidates)


def run_queries(workers: list[FreeWorker], candidates: list[Candidate], now: datetime,
                rnd: Any) -> list[Candidate]:
    """What the recruiter reads: each query's filter, sort on scheduled_at and limit.

    Ties on ``scheduled_at`` come back in an arbitrary order, as from a server.
    """
    found: dict[Any, Candidate] = {}
    for filter_, limit in candidate_queries(workers, now):
        assert filter_["locked"] is False
        matching = [c for c in candidates if c.scheduled_at <= filter_["scheduled_at"]["$lte"]
                    and ("group" not in filter_ or c.group == filter_["group"])]
        rnd.shuffle(matching)
        matching.sort(key=lambda c: c.scheduled_at)
        for c in matching[:limit]:
            found[c.id] = c
    return list(found.values())


@settings(max_examples=300, deadline=None)
@given(workers_and_candidates(unique_times=True), st.randoms(use_true_random=False))
def test_bounded_reads_give_the_same_assignments(
    data: tuple[list[FreeWorker], list[Candidate]], rnd: Any
) -> None:
    workers, candidates = data
    now = at(0)
    ready = [c for c in candidates if c.scheduled_at <= now]
    read = run_queries(workers, candidates, now, rnd)
    assert len(read) <= len(workers) * (1 + len(GROUPS))
    assert select(workers, read) == select(workers, ready)


@settings(max_examples=300, deadline=None)
@given(workers_and_candidates(), st.randoms(use_true_random=False))
def test_bounded_reads_leave_no_worker_idle_needlessly(
    data: tuple[list[FreeWorker], list[Candidate]], rnd: Any
) -> None:
    workers, candidates = data
    now = at(0)
    ready = [c for c in candidates if c.scheduled_at <= now]
    assignments = select(workers, run_queries(workers, candidates, now, rnd))
    taken = {a.job_id for a in assignments}
    served = {a.worker_id for a in assignments}
    for w in workers:
        if w.id not in served:
            assert not any(w.takes(c.group) for c in ready if c.id not in taken)
    assert taken <= {c.id for c in ready}, "a job that is not due yet was assigned"
