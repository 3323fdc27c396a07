"""The read-ahead answers every candidate query exactly as the whole queue would, round after
round, while jobs are taken, put back behind its fences, and new tenants and groups appear;
and every read it makes has the shape the embedded server serves from the index."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recruiter.domain.candidates import Query
from recruiter.domain.control import Paused
from recruiter.domain.selection import Candidate
from recruiter.store import candidate_keys, readahead
from recruiter.store.readahead import ReadAhead
from tests.unit.test_candidates import NOT_PAUSED, FakeCollection, as_document
from tests.unit.test_selection import NOW

GROUPS = ["a", "b", "c"]
TENANTS = ["", "t1", "t2", "t3"]


def compare(value: Any, op: str, operand: Any) -> bool:
    if value is None or type(value) is not type(operand):
        return False  # MongoDB's type bracketing: a range never matches another type
    return {"$lt": value < operand, "$lte": value <= operand, "$gt": value > operand,
            "$gte": value >= operand}[op]


class Server:
    """What a server returns for the read-ahead's finds, and a check of their shape."""

    def __init__(self, jobs: dict[Any, Candidate]) -> None:
        self.jobs = jobs
        self.finds: list[dict[str, Any]] = []

    async def find(self, filter_: dict[str, Any], projection: dict[str, Any] | None,
                   limit: int = 0) -> list[dict[str, Any]]:
        self.finds.append(filter_)
        ranges = [k for k, v in filter_.items() if isinstance(v, dict)]
        assert len(ranges) <= 1, filter_
        assert not any(k.startswith("$") for k in filter_), filter_
        out = []
        for c in self.jobs.values():
            doc = as_document(c)
            if all(all(compare(doc.get(k), op, x) for op, x in v.items()) if isinstance(v, dict)
                   else doc.get(k) == v for k, v in filter_.items()):
                out.append(doc)
        if limit:
            out = sorted(out, key=lambda d: (d["scheduled_at"], d["_id"]))[:limit]
        return out


def job(n: int, group: str, tenant: str, age_s: int, retrying: bool, high: bool) -> Candidate:
    return Candidate(f"j{n:05d}", group, NOW - timedelta(seconds=age_s), tenant,
                     "high" if high else "low", retrying)


jobs_st = st.lists(st.tuples(st.sampled_from(GROUPS), st.sampled_from(TENANTS), st.integers(-3, 30),
                             st.booleans(), st.booleans()), max_size=60)
query_st = st.one_of(
    st.builds(lambda limit, after: Query(limit=limit, group_after=after),
              st.integers(1, 6), st.sampled_from([None, *GROUPS])),
    st.builds(lambda limit, g, after: Query(limit=limit, group=g, tenant_after=after),
              st.integers(1, 6), st.sampled_from(GROUPS), st.sampled_from([None, *TENANTS])),
    st.builds(lambda limit, g, t, low, skip: Query(limit=limit, group=g, tenant=t, lows_only=low, skip=skip),
              st.integers(1, 6), st.sampled_from(GROUPS), st.sampled_from(TENANTS), st.booleans(),
              st.integers(0, 4)),
)
step_st = st.tuples(st.lists(query_st, min_size=1, max_size=3), st.integers(0, 4), jobs_st,
                    st.sampled_from([NOT_PAUSED, Paused(frozenset({"b"}), frozenset({"t2"}))]))


@pytest.fixture(autouse=True)
def small_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(candidate_keys, "WINDOW", 3)  # many fences, on small queues


def ids(rows: list[Any]) -> list[Any]:
    return [r["_id"] if isinstance(r, dict) else r.id for r in rows]


@settings(max_examples=300, deadline=None)
@given(jobs_st, st.lists(step_st, min_size=1, max_size=6), st.randoms(use_true_random=False))
def test_answers_are_the_whole_queues_round_after_round(initial: list[Any], steps: list[Any], rnd: Any) -> None:
    counter = iter(range(100_000))
    jobs = {c.id: c for c in (job(next(counter), *spec) for spec in initial)}
    server = Server(jobs)
    reader = ReadAhead(server.find)
    for queries, taken, arrivals, paused in steps:
        whole = FakeCollection(list(jobs.values()))
        reader.new_round()
        answers = asyncio.run(reader.answer(queries, NOW, paused))
        for q, rows in zip(queries, answers, strict=True):
            assert ids(rows) == ids(whole.run(q, paused)), q
        # Jobs are taken (locked), and others arrive: new tenants, and stragglers due long ago.
        for job_id in rnd.sample(sorted(jobs), min(taken, len(jobs))):
            del jobs[job_id]
        jobs.update((c.id, c) for c in (job(next(counter), *spec) for spec in arrivals))


def test_a_steady_round_reads_one_window_whatever_the_backlog(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(candidate_keys, "WINDOW", 64)
    for backlog in (1_000, 10_000):
        jobs = {c.id: c for c in (job(n, "a", "", 0, False, False) for n in range(backlog))}
        server = Server(jobs)
        reader = ReadAhead(server.find)
        query = Query(limit=8, group="a")
        asyncio.run(reader.answer([query], NOW, NOT_PAUSED))  # the leader's first read: keys of everything
        for c in list(jobs.values())[:8]:
            del jobs[c.id]
        server.finds.clear()
        reader.new_round()
        rows = asyncio.run(reader.answer([query], NOW, NOT_PAUSED))[0]
        assert len(rows) == 8
        finds = list(server.finds)
        returned = sum(len(asyncio.run(server.find(f, None))) for f in finds)
        assert returned <= 2 * candidate_keys.WINDOW, (backlog, returned)
        assert len(finds) <= 6, finds


def test_ties_on_scheduled_at_are_split_by_id() -> None:
    at = NOW - timedelta(seconds=5)
    jobs = {f"j{n:04d}": Candidate(f"j{n:04d}", "a", at) for n in range(50)}
    server = Server(jobs)
    reader = ReadAhead(server.find)
    asyncio.run(reader.answer([Query(limit=2, group="a", tenant="")], NOW, NOT_PAUSED))
    server.finds.clear()
    reader.new_round()
    rows = asyncio.run(reader.answer([Query(limit=2, group="a", tenant="")], NOW, NOT_PAUSED))[0]
    assert ids(rows) == ["j0000", "j0001"]
    assert any(f.get("scheduled_at") == at and "_id" in f for f in server.finds), server.finds


def test_a_gap_is_read_once_in_a_round_and_again_in_the_next() -> None:
    jobs = {"j1": Candidate("j1", "a", NOW - timedelta(seconds=1))}
    server = Server(jobs)
    reader = ReadAhead(server.find)
    ring = Query(limit=3, group="a", tenant_after="")  # the tenants after the default one: a gap
    reader.new_round()
    asyncio.run(reader.answer([ring], NOW, NOT_PAUSED))
    first = len(server.finds)
    assert asyncio.run(reader.answer([ring], NOW, NOT_PAUSED)) == [[]]
    assert len(server.finds) == first, server.finds[first:]  # the same round: not read again
    jobs["j2"] = Candidate("j2", "a", NOW - timedelta(seconds=1), tenant="t1")
    reader.new_round()
    rows = asyncio.run(reader.answer([ring], NOW, NOT_PAUSED))[0]
    assert len(server.finds) > first
    assert ids(rows) == ["j2"]  # the next round reads the gap again, and finds the new tenant


def test_bounds_have_the_forms_the_embedded_server_answers_right() -> None:
    at = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=NOW.tzinfo)
    assert readahead.up_to(at) == {"$lt": datetime(2026, 1, 1, 12, 0, 0, 124000, tzinfo=NOW.tzinfo)}
    assert readahead.above("t1") == {"$gte": "t1\x00"}
    assert "t1" < "t1\x00" < "t10" < "t2"


def test_jobs_whose_keys_cannot_be_placed_are_set_aside_for_quarantine() -> None:
    class Odd(Server):
        async def find(self, filter_: dict[str, Any], projection: dict[str, Any] | None,
                       limit: int = 0) -> list[dict[str, Any]]:
            rows = await super().find(filter_, projection, limit)
            if "tenant" not in filter_ and "status" not in filter_:
                rows += [{"_id": "bad-tenant", "locked": False, "group": "a", "tenant": 7, "status": "queued",
                          "priority": "low", "scheduled_at": NOW},
                         {"_id": "bad-date", "locked": False, "group": "a", "tenant": None, "status": "queued",
                          "priority": "low", "scheduled_at": "yesterday"}]
            return rows

    server = Odd({"j1": Candidate("j1", "a", NOW)})
    reader = ReadAhead(server.find)
    rows = asyncio.run(reader.answer([Query(limit=5)], NOW, NOT_PAUSED))[0]
    assert ids(rows) == ["j1"]
    assert sorted(reader.unplaceable) == ["bad-date", "bad-tenant"]


def test_a_document_as_id_is_set_aside_not_hashed() -> None:
    server = Server({})
    server.find = _with_rows(server.find, [{"_id": {"id": 1}, "locked": False, "group": "a", "tenant": None,
                                            "status": "queued", "priority": "low", "scheduled_at": NOW}])
    reader = ReadAhead(server.find)
    assert asyncio.run(reader.answer([Query(limit=5)], NOW, NOT_PAUSED)) == [[]]
    assert reader.unplaceable == [{"id": 1}]


def _with_rows(find: Any, extra: list[dict[str, Any]]) -> Any:
    async def wrapped(filter_: dict[str, Any], projection: dict[str, Any] | None, limit: int = 0) -> Any:
        return [*await find(filter_, projection, limit), *(extra if "status" not in filter_ else [])]
    return wrapped


def test_a_stream_is_read_once_in_a_round_and_again_in_the_next() -> None:
    jobs = {"j1": Candidate("j1", "a", NOW - timedelta(seconds=1))}
    server = Server(jobs)
    reader = ReadAhead(server.find)
    query = Query(limit=2, group="a", tenant="")
    reader.new_round()
    assert ids(asyncio.run(reader.answer([query], NOW, NOT_PAUSED))[0]) == ["j1"]
    first = len(server.finds)
    assert ids(asyncio.run(reader.answer([query], NOW, NOT_PAUSED))[0]) == ["j1"]
    assert len(server.finds) == first, server.finds[first:]  # the same round: answered from that read
    assert reader.take_found()[0].keys() == {"j1"}  # whole, handed over with each answer
    jobs["j2"] = Candidate("j2", "a", NOW - timedelta(seconds=1))
    reader.new_round()
    assert ids(asyncio.run(reader.answer([query], NOW, NOT_PAUSED))[0]) == ["j1", "j2"]


def test_a_stream_read_for_fewer_rows_than_asked_is_read_again() -> None:
    jobs = {f"j{n}": Candidate(f"j{n}", "a", NOW - timedelta(seconds=10 - n)) for n in range(5)}
    server = Server(jobs)
    reader = ReadAhead(server.find)
    reader.new_round()
    assert ids(asyncio.run(reader.answer([Query(limit=2, group="a", tenant="")], NOW, NOT_PAUSED))[0]) == ["j0", "j1"]
    first = len(server.finds)
    rows = asyncio.run(reader.answer([Query(limit=2, group="a", tenant="", skip=2)], NOW, NOT_PAUSED))[0]
    assert ids(rows) == ["j2", "j3"]
    assert len(server.finds) > first


def test_the_ring_past_the_last_tenant_reads_the_first_tenants_stream_with_its_gap() -> None:
    """Asked for the tenants after the last one (a gap), the read-ahead reads the first tenant's
    stream at the same time: the ring from its start, asked next in the same round, reads nothing."""
    jobs = {"j1": Candidate("j1", "a", NOW - timedelta(seconds=1))}
    server = Server(jobs)
    reader = ReadAhead(server.find)
    reader.new_round()
    asyncio.run(reader.answer([Query(limit=1, group="a")], NOW, NOT_PAUSED))  # learns the default tenant
    reader.take_found()
    reader.new_round()
    server.finds.clear()
    assert asyncio.run(reader.answer([Query(limit=1, group="a", tenant_after="")], NOW, NOT_PAUSED)) == [[]]
    assert any("tenant" in f and isinstance(f["tenant"], dict) for f in server.finds)  # the gap
    assert any(f.get("tenant") is None and f.get("status") == "queued" for f in server.finds)  # the stream
    sent = len(server.finds)
    rows = asyncio.run(reader.answer([Query(limit=1, group="a")], NOW, NOT_PAUSED))[0]
    assert ids(rows) == ["j1"]
    assert len(server.finds) == sent, server.finds[sent:]
    assert reader.take_found()[0].keys() == {"j1"}


def test_the_probe_of_workers_groups_is_read_with_the_other_queries() -> None:
    """The probe of the workers' own groups and the other queries' reads are in flight together."""
    jobs = {"j1": Candidate("j1", "a", NOW - timedelta(seconds=1))}
    server = Server(jobs)
    log: list[tuple[str, bool]] = []  # (start or end, whether the probe)

    async def slow_find(filter_: dict[str, Any], projection: dict[str, Any] | None,
                        limit: int = 0) -> list[dict[str, Any]]:
        probe = isinstance(filter_.get("group"), dict)
        log.append(("start", probe))
        await asyncio.sleep(0.01)
        log.append(("end", probe))
        return await server.find(filter_, projection, limit)

    reader = ReadAhead(slow_find)
    reader.new_round()
    aimed = Query(limit=1, group="@worker:w1", tenant="")
    answers = asyncio.run(reader.answer([aimed, Query(limit=1, group="a", tenant="")], NOW, NOT_PAUSED))
    assert ids(answers[1]) == ["j1"]
    assert answers[0] == []
    assert log.count(("start", True)) == 1
    # Another read started before the probe's came back.
    assert log.index(("start", False)) < log.index(("end", True)), log
