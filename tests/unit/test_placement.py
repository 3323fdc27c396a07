"""Jobs aimed at one worker (pure parts), and ``at_most_once`` as a class attribute."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from recruiter.domain.builder import JobBuilder
from recruiter.domain.candidates import Query, first_queries
from recruiter.domain.control import NOT_PAUSED
from recruiter.domain.job import JobOptions, JobRefused, build_job_document
from recruiter.domain.outcome import archived_document
from recruiter.domain.placement import (
    WORKER_DEADLINE,
    declared_group,
    is_worker_group,
    unplaced_outcome,
    worker_group,
)
from recruiter.domain.requeue import retry_copy
from recruiter.domain.retry import ExponentialBackoff, RetriableExceptionFilter, SelectByException, WorkerCrashed
from recruiter.domain.selection import ANY_GROUP, Candidate, Cursor, FreeWorker, select
from recruiter.domain.workable import Workable
from recruiter.processes.worker.config import WorkerConfig
from recruiter.processes.worker.executor import context_of
from recruiter.store.readahead import WORKER_GROUPS, ReadAhead
from tests.unit.test_readahead import Server

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Charge(Workable):
    group = "billing"

    def __init__(self, n: int) -> None:
        self.n = n

    def execute(self) -> None:
        pass


class Once(Charge):
    at_most_once = True


class NoRecruiter:
    def enqueue(self, item: JobBuilder, *, session: object = None) -> object:
        raise AssertionError("not enqueued in these tests")


def builder(workable: Workable | None = None) -> JobBuilder:
    return JobBuilder(workable or Charge(1), NoRecruiter())


def test_on_worker_gives_the_reserved_group_and_keeps_the_declared_one() -> None:
    doc = builder().on_worker("billing-1").build(NOW)
    assert doc["group"] == "@worker:billing-1" == worker_group("billing-1")
    assert doc["on_worker"] == {"worker": "billing-1", "group": "billing"}
    assert declared_group(doc) == "billing"
    # The job sees the group it was enqueued in, not the reserved one.
    assert context_of("billing-1-0", {**doc, "attempts": 1}).group == "billing"
    # Without on_worker nothing changes.
    plain = builder().build(NOW)
    assert plain["group"] == "billing"
    assert "on_worker" not in plain


def test_a_deadline_is_a_delay_from_the_enqueue_or_a_time() -> None:
    doc = builder().in_group("reports").on_worker("w", deadline=timedelta(minutes=5)).build(NOW)
    assert doc["on_worker"] == {"worker": "w", "group": "reports", "deadline": NOW + timedelta(minutes=5)}
    at = datetime(2026, 3, 2, tzinfo=UTC)
    assert builder().on_worker("w", deadline=at).build(NOW)["on_worker"]["deadline"] == at


@pytest.mark.parametrize(("worker_id", "deadline", "words"), [
    ("", None, "non-empty"),
    ("   ", None, "non-empty"),
    (None, None, "non-empty"),
    ("a.b", None, "'.'"),
    ("$x", None, "'$'"),
    ("x" * 193, None, "at most 192"),
    ("w", timedelta(seconds=-1), "positive"),
    ("w", "tomorrow", "datetime or a timedelta"),
])
def test_bad_on_worker_is_one_line(worker_id: object, deadline: object, words: str) -> None:
    with pytest.raises(JobRefused) as refused:
        builder().on_worker(worker_id, deadline=deadline)  # type: ignore[arg-type]
    assert words in str(refused.value)
    assert "\n" not in str(refused.value)
    if worker_id is None:
        return  # JobOptions(on_worker=None) is a job aimed at no worker
    # The options, set past the builder's check, are refused when the document is built.
    with pytest.raises(JobRefused):
        build_job_document(Charge(1), JobOptions(on_worker=worker_id, worker_deadline=deadline), NOW)  # type: ignore[arg-type]


def test_no_user_group_can_take_a_reserved_name() -> None:
    with pytest.raises(JobRefused, match="reserved"):
        builder().in_group("@worker:billing-1")
    with pytest.raises(ValueError, match="reserved"):
        WorkerConfig(groups=("@worker:billing-1",))


def test_at_most_once_as_a_class_attribute() -> None:
    assert builder(Once(1)).build(NOW)["at_most_once"] is True
    assert "at_most_once" not in builder().build(NOW)
    assert builder().at_most_once().build(NOW)["at_most_once"] is True


def test_at_most_once_refuses_a_policy_that_retries_crashes() -> None:
    crash_retrying = SelectByException([(WorkerCrashed, ExponentialBackoff(times=3))],
                                       default=ExponentialBackoff(times=2))
    with pytest.raises(JobRefused, match="retries crashes") as refused:
        builder().retry_with(crash_retrying).at_most_once().build(NOW)
    assert "\n" not in str(refused.value)
    with pytest.raises(JobRefused, match="retries crashes"):
        builder(Once(1)).retry_with(crash_retrying).build(NOW)
    # A policy that only judges failures is fine with at_most_once: crashes never reach it.
    fine = RetriableExceptionFilter(ExponentialBackoff(times=3), [ValueError])
    assert builder().retry_with(fine).at_most_once().build(NOW)["at_most_once"] is True
    # Without at_most_once, the same policy is accepted as before.
    assert builder().retry_with(crash_retrying).build(NOW)["group"] == "billing"


def job(job_id: str, group: str) -> Candidate:
    return Candidate(job_id, group, NOW - timedelta(seconds=1))


def test_star_workers_never_take_a_worker_group() -> None:
    star = FreeWorker("any", (ANY_GROUP,))
    assert not star.takes("@worker:b1")
    assert star.takes("billing")
    picked = select([star, FreeWorker("other", ("billing", "@worker:other"))],
                    [job("aimed", "@worker:b1")], Cursor(), NOW)
    assert picked.assignments == []  # its worker is absent: it waits, whoever idles


def test_the_job_goes_to_its_worker_among_idle_ones() -> None:
    workers = [FreeWorker("any", (ANY_GROUP, "@worker:any")), FreeWorker("b0", ("billing", "@worker:b0")),
               FreeWorker("b1-0", ("billing", "@worker:b1")), FreeWorker("b1-1", ("billing", "@worker:b1"))]
    jobs = [job("aimed", "@worker:b1"), job("plain", "billing")]
    picked = select(workers, jobs, Cursor(), NOW)
    by_job = {a.job_id: a.worker_id for a in picked.assignments}
    assert by_job["aimed"] in ("b1-0", "b1-1")
    assert set(by_job) == {"aimed", "plain"}
    # A cursor that served the reserved group last does not make '*' read it.
    assert select([workers[0]], [job("aimed", "@worker:b1")], Cursor("@worker:b1", {"@worker:b1": ""}),
                  NOW).assignments == []


def test_ring_reads_leave_worker_groups_out() -> None:
    group = Query(limit=5).filter(NOW)["group"]
    assert isinstance(group, dict)
    assert group["$not"].match("@worker:b1")
    assert not group["$not"].match("billing")
    assert is_worker_group("@worker:x")
    assert not is_worker_group("worker:x")
    assert not is_worker_group(None)


def test_archived_unplaced_and_retry_copy() -> None:
    doc = dict(builder().on_worker("w", deadline=timedelta(seconds=1)).build(NOW))
    archived = archived_document(doc, unplaced_outcome(WORKER_DEADLINE, "too late"), NOW)
    assert archived["why"] == WORKER_DEADLINE
    assert archived["reason"] == "too late"
    assert archived["attempts"] == 0
    assert archived["executions"] == []
    copy = retry_copy({**archived, "_id": doc["_id"]}, NOW)
    assert copy["group"] == "@worker:w"
    assert copy["on_worker"] == {"worker": "w", "group": "billing"}


def test_a_round_probes_the_worker_groups_once_not_once_per_free_worker() -> None:
    due = NOW - timedelta(seconds=1)
    server = Server({c.id: c for c in [Candidate("aimed", "@worker:w3", due), Candidate("plain", "billing", due)]})
    ahead = ReadAhead(server.find)
    workers = [FreeWorker(f"w{i}", ("billing", f"@worker:w{i}")) for i in range(10)]
    queries = first_queries(workers, Cursor())
    answers = asyncio.run(ahead.answer(queries, NOW, NOT_PAUSED))
    by_group = {q.group: [d["_id"] for d in rows] for q, rows in zip(queries, answers, strict=True)}
    assert by_group["@worker:w3"] == ["aimed"]
    assert by_group["@worker:w4"] == []
    assert by_group["billing"] == ["plain"]
    # One probe of the reserved range, then reads of w3's group only: not one per free worker.
    reserved = [f for f in server.finds if is_worker_group(f.get("group")) or f.get("group") == WORKER_GROUPS]
    assert len(reserved) <= 6, reserved
    assert all(f.get("group") in (WORKER_GROUPS, "@worker:w3") for f in reserved)
    # '*' workers' ring of groups never meets an aimed job.
    ring = asyncio.run(ahead.answer([Query(limit=10)], NOW + timedelta(seconds=1), NOT_PAUSED))
    assert [d["_id"] for d in ring[0]] == ["plain"]
