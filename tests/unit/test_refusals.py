"""Jobs a worker cannot run (recruiter.domain.refusals): the pure decisions and the selection."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from recruiter.domain.candidates import candidate_from
from recruiter.domain.naming import ANY_GROUP
from recruiter.domain.refusals import MAX_BACKOFF, UNRUNNABLE, decide_refusal, refusal_document, refused_by
from recruiter.domain.retry import Archive, RetryAt
from recruiter.domain.selection import Candidate, Cursor, FreeWorker, select

NOW = datetime(2026, 11, 25, 12, tzinfo=UTC)
HOUR = timedelta(hours=1)


def refused(*processes: str, until: datetime | None = None) -> dict[str, Any]:
    job: dict[str, Any] = {"refusals": [refusal_document(p, f"{p}-0", "cannot import x:Y", NOW) for p in processes]}
    if until is not None:
        job["refusals_until"] = until
    return job


def test_a_refusal_puts_the_job_back_a_little_later_until_the_limit() -> None:
    decision, until = decide_refusal({}, "cannot import x:Y", NOW, HOUR)
    assert decision == RetryAt(NOW + timedelta(seconds=1))
    assert until == NOW + HOUR
    many = refused(*(f"p{i}" for i in range(12)))
    assert decide_refusal(many, "r", NOW, HOUR)[0] == RetryAt(NOW + MAX_BACKOFF)
    # Never past the limit, and at the limit archived with the reason.
    first = {**many, "first_refused_at": NOW - HOUR + timedelta(seconds=5)}
    assert decide_refusal(first, "r", NOW, HOUR)[0] == RetryAt(NOW + timedelta(seconds=5))
    late = {**many, "first_refused_at": NOW - HOUR}
    decision, _ = decide_refusal(late, "cannot import x:Y", NOW, HOUR)
    assert isinstance(decision, Archive)
    assert decision.why == UNRUNNABLE
    assert "cannot import x:Y" in str(decision.reason)


def test_refused_by_reads_untrusted_documents_and_opens_at_the_limit() -> None:
    assert refused_by({}) == frozenset()
    assert refused_by({"refusals": "nonsense"}) == frozenset()
    assert refused_by({"refusals": [3, {"process": 4}, {"process": "p"}]}) == {"p"}
    job = refused("p", "q", until=NOW + HOUR)
    assert refused_by(job, NOW) == {"p", "q"}
    assert refused_by(job, NOW + HOUR) == frozenset()
    assert refused_by({**job, "refusals_until": "soon"}, NOW + 2 * HOUR) == {"p", "q"}


def test_a_candidate_carries_its_refusals() -> None:
    doc = {"_id": 1, "group": "g", "scheduled_at": NOW, "status": "retrying", **refused("p", until=NOW + HOUR)}
    assert candidate_from(doc, NOW).refused_by == {"p"}  # type: ignore[arg-type]
    assert candidate_from(doc, NOW + HOUR).refused_by == frozenset()  # type: ignore[arg-type]


PROCESSES = ["p0", "p1", "p2"]
GROUPS = ["a", "b"]


@st.composite
def scenarios(draw: Any) -> tuple[list[FreeWorker], list[Candidate]]:
    workers = [FreeWorker(f"w{i}", (draw(st.sampled_from([*GROUPS, ANY_GROUP])),),
                          process=draw(st.sampled_from(PROCESSES)))
               for i in range(draw(st.integers(0, 6)))]
    jobs = [Candidate(f"j{i:02d}", draw(st.sampled_from(GROUPS)), NOW - timedelta(seconds=i),
                      refused_by=frozenset(draw(st.lists(st.sampled_from(PROCESSES), max_size=3))))
            for i in range(draw(st.integers(0, 15)))]
    return workers, jobs


@settings(max_examples=500, deadline=None)
@given(scenarios())
def test_a_job_never_goes_to_a_process_that_refused_it_and_no_worker_idles_for_nothing(
        data: tuple[list[FreeWorker], list[Candidate]]) -> None:
    workers, jobs = data
    selection = select(workers, jobs, Cursor(), NOW)
    by_id = {c.id: c for c in jobs}
    by_worker = {w.id: w for w in workers}
    assert all(n == 1 for n in Counter(a.job_id for a in selection.assignments).values())
    assert len({a.worker_id for a in selection.assignments}) == len(selection.assignments)
    for a in selection.assignments:
        worker, job = by_worker[a.worker_id], by_id[a.job_id]
        assert worker.process not in job.refused_by
        assert worker.takes(job.group)
    # Work-conserving: a free worker left idle has no job it could take (refused jobs do not block others).
    taken = {a.job_id for a in selection.assignments}
    served = {a.worker_id for a in selection.assignments}
    for w in workers:
        if w.id not in served:
            assert not [c for c in jobs if c.id not in taken and w.takes(c.group) and w.process not in c.refused_by]
