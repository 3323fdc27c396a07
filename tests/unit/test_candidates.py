"""Reading just enough of the queue: the planned reads give the same round as the
whole queue would, within bounds that do not depend on the backlog."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from recruiter.domain.candidates import SORT, Query, first_queries, plan_round
from recruiter.domain.control import Paused
from recruiter.domain.job import Status
from recruiter.domain.selection import (
    ANY_GROUP,
    DEFAULT_SCHEME,
    Candidate,
    CountingScheme,
    Cursor,
    FreeWorker,
    Selection,
    select,
)
from recruiter.store.indexes import INDEXES
from recruiter.store.layout import SCHEDULED
from tests.unit.test_selection import GROUPS, NOW, TENANTS, scenarios, workers_of

NOT_PAUSED = Paused()


def as_document(c: Candidate) -> dict[str, Any]:
    return {"_id": c.id, "locked": False, "group": c.group, "tenant": c.tenant or None,
            "status": Status.RETRYING.value if c.retrying else Status.QUEUED.value,
            "priority": c.priority, "scheduled_at": c.scheduled_at}


def matches(value: Any, condition: Any) -> bool:
    """The query operators the candidate filters use, with MongoDB's type bracketing."""
    if not isinstance(condition, dict):
        return bool(value == condition)
    for op, operand in condition.items():
        comparable = value is not None and type(value) is type(operand)
        if op == "$gt":
            ok = comparable and value > operand
        elif op == "$lte":
            ok = comparable and value <= operand
        elif op == "$in":
            ok = value in operand
        elif op == "$not":  # the reserved groups of jobs aimed at one worker: a prefix regex
            ok = not (isinstance(value, str) and operand.match(value))
        else:
            assert op == "$nin", op
            ok = value not in operand
        if not ok:
            return False
    return True


def sort_key(doc: dict[str, Any]) -> tuple[Any, ...]:
    key: list[Any] = []
    for name, direction in SORT:
        value = doc[name]
        if name == "tenant":
            value = (0, "") if value is None else (1, value)
        elif name == "status":
            assert direction == -1
            value = 0 if value == Status.RETRYING.value else 1
        elif name == "_id":
            value = str(value)
        key.append(value)
    return tuple(key)


class FakeCollection:
    """What the server does with a candidate query: filter, index order, skip, limit."""

    def __init__(self, jobs: list[Candidate]) -> None:
        self.docs = {c.id: (as_document(c), c) for c in jobs}
        self.reads = 0
        self.documents = 0

    def run(self, query: Query, paused: Paused = NOT_PAUSED) -> list[Candidate]:
        f = query.filter(NOW, paused)
        found = sorted((pair for pair in self.docs.values()
                        if all(matches(pair[0].get(k), v) for k, v in f.items())), key=lambda p: sort_key(p[0]))
        rows = [c for _, c in found[query.skip: query.skip + query.limit]]
        self.documents += len(rows)
        return rows

    def plan(self, workers: list[FreeWorker], cursor: Cursor, scheme: CountingScheme = DEFAULT_SCHEME,
             paused: Paused = NOT_PAUSED) -> Selection:
        plan = plan_round(workers, cursor, NOW, scheme)
        queries = next(plan)
        while True:
            self.reads += 1
            try:
                queries = plan.send([self.run(q, paused) for q in queries])
            except StopIteration as stop:
                result: Selection = stop.value
                return result


# -- the plan gives the same round as the whole queue -----------------------------------------


@settings(max_examples=500, deadline=None)
@given(scenarios())
def test_planned_reads_give_the_same_round(data: tuple[list[FreeWorker], list[Candidate], Cursor,
                                                        CountingScheme]) -> None:
    workers, jobs, cursor, scheme = data
    server = FakeCollection(jobs)
    assert server.plan(workers, cursor, scheme) == select(workers, jobs, cursor, NOW, scheme)
    assert server.reads <= 2 * len(workers) + 2


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 8), min_size=1, max_size=12), st.integers(1, 5), st.randoms(use_true_random=False))
def test_planned_rounds_in_a_row_match_the_whole_queue(round_sizes: list[int], n_tenants: int, rnd: Any) -> None:
    tenants = TENANTS[:n_tenants]
    jobs = [Candidate(f"j{i:03d}", rnd.choice(GROUPS), NOW - timedelta(seconds=rnd.randint(0, 50)),
                      rnd.choice(tenants), rnd.choice(["high", "low"]), rnd.random() < 0.2) for i in range(60)]
    server = FakeCollection(jobs)
    cursor = Cursor()
    for n in round_sizes:
        workers = [FreeWorker(f"w{i}", rnd.choice([(ANY_GROUP,), ("a",), ("b", "c")])) for i in range(n)]
        expected = select(workers, [c for _, c in server.docs.values()], cursor, NOW)
        got = server.plan(workers, cursor)
        assert got == expected
        cursor = got.cursor
        for a in got.assignments:
            del server.docs[a.job_id]


def backlog(n_jobs: int, n_tenants: int, group: str = "a") -> list[Candidate]:
    """Every tenant has ready jobs, high and low; some are retrying, some not due."""
    return [Candidate(f"j{i:06d}", group, NOW + timedelta(seconds=(i % 7) - 5), f"t{i % n_tenants:04d}",
                      "high" if i % 3 == 0 else "low", i % 11 == 0) for i in range(n_jobs)]


def test_reads_do_not_grow_with_the_backlog() -> None:
    figures = {}
    for n_jobs in (100, 1_000, 10_000):
        for n_tenants in (1, 10, 50):
            server = FakeCollection(backlog(n_jobs, n_tenants))
            selection = server.plan(workers_of(16, "a"), Cursor(last_tenant={"a": "t0003"}))
            assert len(selection.assignments) == 16
            figures[(n_jobs, n_tenants)] = (server.reads, server.documents)
    for n_tenants in (1, 10, 50):
        # Once every tenant has more ready jobs than the round can take, the figures stay put.
        assert figures[(1_000, n_tenants)] == figures[(10_000, n_tenants)], figures
    assert figures[(10_000, 1)][0] <= 2
    assert all(reads <= 16 + 2 and documents <= 16 * 8 for reads, documents in figures.values()), figures


def test_one_tenant_one_group_is_one_read_in_steady_state() -> None:
    for workers in (workers_of(16), workers_of(16, "a")):
        server = FakeCollection(backlog(1_000, 1))
        first = server.plan(workers, Cursor())
        assert len(first.assignments) == 16
        for a in first.assignments:
            del server.docs[a.job_id]
        server.reads = 0
        second = server.plan(workers, first.cursor)
        assert len(second.assignments) == 16
        assert server.reads == 1


def test_paused_groups_and_tenants_are_not_read() -> None:
    jobs = [Candidate("a1", "a", NOW, "x"), Candidate("a2", "a", NOW, "y"), Candidate("b1", "b", NOW, "x")]
    server = FakeCollection(jobs)
    selection = server.plan(workers_of(3), Cursor(), paused=Paused(groups=frozenset({"b"}), tenants=frozenset({"x"})))
    assert [a.job_id for a in selection.assignments] == ["a2"]


# -- every query is served by the candidates index ----------------------------------------------


def index_keys() -> list[tuple[str, int]]:
    (model,) = [m for m in INDEXES[SCHEDULED] if m.document["name"] == "candidates"]
    return list(model.document["key"].items())


def test_every_candidate_query_is_an_index_prefix_scan_in_index_order() -> None:
    keys = index_keys()
    assert keys[0] == ("locked", 1)
    assert keys[1:] == SORT
    cursor = Cursor("b", {"a": "t1", "b": ""}, {})
    workers = [FreeWorker("w0", (ANY_GROUP,)), FreeWorker("w1", ("a",)), FreeWorker("w2", ("c", "a"))]
    queries = [*first_queries(workers, cursor),
               Query(limit=3, group="a", tenant="t2", skip=4), Query(limit=3, group="a", tenant="", lows_only=True)]
    paused = Paused(frozenset({"z"}), frozenset({"t9"}))
    for query in queries:
        f = query.filter(NOW, paused)
        # Every condition bounds an index field, so the scan needs no document to filter;
        # `locked` is an equality and the sort is the rest of the index in its order, so
        # the scan yields the documents sorted and stops after skip + limit.
        assert set(f) <= {name for name, _ in keys}, f
        assert f["locked"] is False
        assert f["scheduled_at"] == {"$lte": NOW}
        if query.group is not None:
            assert f["group"] == query.group
        if query.tenant is not None:
            assert f["tenant"] == (query.tenant or None)


def test_index_order_assumptions_hold() -> None:
    # The candidates index sorts status descending so retrying jobs come first,
    # and priority ascending so high comes before low.
    assert Status.RETRYING.value > Status.QUEUED.value
    assert "high" < "low"
