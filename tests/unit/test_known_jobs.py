"""What a leader knows of a group answers every query on it as the whole queue would; it is known
only from a read that returned the group whole, for a bounded time, and forgotten on anything
that is not a plain enqueue."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from recruiter.domain.candidates import Query
from recruiter.domain.control import Paused
from recruiter.domain.selection import Candidate
from recruiter.processes import known_jobs
from recruiter.processes.known_jobs import KnownGroup, KnownJobs
from tests.unit.test_candidates import NOT_PAUSED, FakeCollection, as_document
from tests.unit.test_documents import queued_job
from tests.unit.test_selection import NOW

TENANTS = ["", "t1", "t2", "t3"]


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def job(n: int, group: str, tenant: str, age_s: int, retrying: bool, high: bool) -> Candidate:
    return Candidate(f"j{n:04d}", group, NOW - timedelta(seconds=age_s), tenant, "high" if high else "low", retrying)


jobs_st = st.lists(st.tuples(st.sampled_from(["g", "h"]), st.sampled_from(TENANTS), st.integers(-5, 30),
                             st.booleans(), st.booleans()), max_size=40)
query_st = st.one_of(
    st.builds(lambda limit, after: Query(limit=limit, group="g", tenant_after=after),
              st.integers(1, 8), st.sampled_from([None, *TENANTS[1:]])),
    st.builds(lambda limit, t, low, skip: Query(limit=limit, group="g", tenant=t, lows_only=low, skip=skip),
              st.integers(1, 8), st.sampled_from(TENANTS), st.booleans(), st.integers(0, 4)),
)


@settings(max_examples=300, deadline=None)
@given(jobs_st, st.lists(query_st, min_size=1, max_size=5),
       st.sampled_from([NOT_PAUSED, Paused(frozenset(), frozenset({"t2"}))]))
def test_a_known_group_answers_every_query_as_the_whole_queue(specs: list[Any], queries: list[Query],
                                                             paused: Paused) -> None:
    jobs = [job(n, *spec) for n, spec in enumerate(specs)]  # some not due yet (a negative age)
    known = KnownJobs(clock=Clock())
    known.groups["g"] = KnownGroup(100.0, {c.id: as_document(c) for c in jobs if c.group == "g"})
    whole = FakeCollection(jobs)
    for q in queries:
        rows = known.answer(q, NOW, paused)
        assert rows is not None
        assert [d["_id"] for d in rows] == [c.id for c in whole.run(q, paused)], q
    assert known.answer(Query(limit=3, group="h"), NOW, NOT_PAUSED) is None  # not known: read
    assert known.answer(Query(limit=3), NOW, NOT_PAUSED) is None  # a ring of groups: read


def _docs(*candidates: Candidate) -> list[dict[str, Any]]:
    return [as_document(c) for c in candidates]


def test_a_group_is_known_from_a_read_that_returned_it_whole_once_the_round_commits() -> None:
    clock = Clock()
    known = KnownJobs(clock=clock)
    a, b = job(1, "g", "", 3, False, False), job(2, "g", "", 2, False, False)
    known.observed(Query(limit=4, group="g"), _docs(a, b), clock(), short=True)
    known.observed(Query(limit=2, group="h"), _docs(job(3, "h", "", 1, False, False)), clock(), short=False)
    known.observed(Query(limit=4, group="k", tenant=""), [], clock(), short=True)  # one tenant, not the group
    assert known.answer(Query(limit=4, group="g"), NOW, NOT_PAUSED) is None, "not before the round commits"
    known.committed([a.id])  # the round handed out a
    rows = known.answer(Query(limit=4, group="g"), NOW, NOT_PAUSED)
    assert rows is not None
    assert [d["_id"] for d in rows] == [b.id]
    assert set(known.groups) == {"g"}  # h's read was full (there may be more), k's was one tenant
    # A round that fails forgets what its reads found.
    known.observed(Query(limit=4, group="h"), [], clock(), short=True)
    known.abandoned()
    known.committed([], whole=False)
    assert set(known.groups) == {"g"}
    # A quiet round adds what it read whole; a reading round replaces everything known with what it read.
    known.observed(Query(limit=4, group="h"), [], clock(), short=True)
    known.committed([], whole=False)
    assert set(known.groups) == {"g", "h"}
    known.observed(Query(limit=4, group="h"), [], clock(), short=True)
    known.committed([])
    assert set(known.groups) == {"h"}


def test_a_known_group_is_read_again_after_the_longest_idle_wait() -> None:
    clock = Clock()
    known = KnownJobs(max_age_s=1.0, clock=clock)
    known.groups["g"] = KnownGroup(clock())
    clock.t += 0.9
    assert known.answer(Query(limit=1, group="g"), NOW, NOT_PAUSED) == []
    clock.t += 0.2  # a job that became due by the clock raised no event: read
    assert known.answer(Query(limit=1, group="g"), NOW, NOT_PAUSED) is None
    assert known.groups == {}


def _job_document(n: int, group: str, **extra: Any) -> dict[str, Any]:
    """An enqueued job's document, as its insert event carries it."""
    return queued_job(_id=f"a{n}", group=group, **extra)


def test_arrivals_join_known_groups_and_anything_odd_forgets_everything() -> None:
    known = KnownJobs(clock=Clock())
    known.groups["g"] = KnownGroup(100.0)
    known.arrive([_job_document(1, "g"), _job_document(2, "other")])
    assert list(known.groups["g"].jobs) == ["a1"]  # a group not known is read anyway
    known.arrive([_job_document(3, "g", locked=True)])  # inserted locked: not a plain enqueue
    assert known.groups == {}
    known.groups["g"] = KnownGroup(100.0)
    known.arrive([_job_document(4, "g", scheduled_at="tomorrow")])  # malformed: the reads quarantine it
    assert known.groups == {}
    known.groups["g"] = KnownGroup(100.0)
    known.arrive([_job_document(n, "g") for n in range(known_jobs.MAX_ARRIVALS + 1)])  # a burst: read
    assert known.groups == {}
