"""Following jobs to their results with the real processes: ``recruiter start``, two
``worker start`` and ``cleaner start``. A producer enqueues 200 jobs, waits for all of
them, and gets every result, and a JobFailed with its trace for each job that fails for
good, while sharing one change stream among its waits, however many jobs they wait for."""

from __future__ import annotations

import time
from typing import Any

from bench.commands import Commands
from recruiter import JobFailed, JobHandle, Recruiter
from recruiter.producer.waiting import SAFETY_READ_S
from tests.following_jobs import RefuseInput, Square
from tests.processes.conftest import Processes

JOBS = 200
FAILING_EVERY = 10  # every 10th job fails for good: 20 of 200


def streams_opened(commands: Commands) -> int:
    """Change streams the producer opened on ``archived`` (aggregates starting with $changeStream)."""
    return sum(1 for cmd in commands.named("aggregate", "archived") if "$changeStream" in cmd["pipeline"][0])


def check(handle: JobHandle, n: int, outcome: object) -> None:
    """``outcome`` is job ``n``'s result, or its JobFailed, as the job's class says."""
    if n % FAILING_EVERY:
        assert outcome == {"n": n, "square": n * n}, (n, outcome)
        assert (handle.state, handle.why, handle.attempts) == ("archived", "done", 1)
        return
    assert isinstance(outcome, JobFailed), (n, outcome)
    assert str(outcome) == f"job {handle} ended tried-too-many-times: ValueError: bad input {n}"
    assert outcome.why == "tried-too-many-times"
    assert outcome.job_id == handle
    assert outcome.execution is not None
    assert outcome.execution["attempt"] == 2
    assert outcome.trace is not None
    assert "in check_input" in outcome.trace
    assert outcome.trace.rstrip().endswith(f"ValueError: bad input {n}")


def test_a_producer_waits_for_200_jobs_with_one_stream_for_all_its_waits(processes: Processes, db: Any,
                                                                 db_uri: str) -> None:
    processes.recruiter()
    processes.cleaner()
    processes.worker("--id", "w-stream", "--wake", "change-stream", "--concurrency", "2")
    processes.worker("--id", "w-poll", "--wake", "poll", "--concurrency", "2")
    commands = Commands()
    started = time.monotonic()
    with Recruiter.connect(db_uri, event_listeners=[commands]) as rec:
        jobs = [Square(n) if n % FAILING_EVERY else RefuseInput(n) for n in range(JOBS)]
        first = rec.enqueue_many(jobs[: JOBS // 2])
        second = rec.enqueue_many(jobs[JOBS // 2:])
        number = {h: n for n, h in enumerate([*first, *second])}

        # The first half as each job finishes, while the second half runs too.
        seen = []
        for handle in rec.as_completed(first, timeout=180):
            assert handle.finished
            try:
                outcome = handle.wait()  # at once: the handle holds its finished view
            except JobFailed as exc:
                outcome = exc
            check(handle, number[handle], outcome)
            seen.append(handle)
        assert sorted(seen) == sorted(first)
        assert streams_opened(commands) == 1

        # All of them, results in order (a JobFailed in place of a failed job's result).
        results = rec.wait_all([*first, *second], timeout=180, return_exceptions=True)
        for handle, outcome in zip([*first, *second], results, strict=True):
            check(handle, number[handle], outcome)
        assert sum(isinstance(r, JobFailed) for r in results) == JOBS // FAILING_EVERY

        # One stream for both calls (the second joined it), not one per call or per job; the
        # producer wrote only its two batches.
        assert streams_opened(commands) == 1
        assert [name for name, _, _ in commands.events if name in ("insert", "update", "delete")] == ["insert"] * 2
        # Each event named one job, read by _id: at most one read of archived per job, plus each call's first
        # reads and its safety reads (one every SAFETY_READ_S).
        safety_reads = 2 * (int((time.monotonic() - started) / SAFETY_READ_S) + 1)
        assert len(commands.named("find", "archived")) <= JOBS + 2 * 2 + safety_reads
    assert db.archived.count_documents({}) == JOBS
    workers = {d["last_execution"]["worker"] for d in db.archived.find({}, {"last_execution": 1})}
    assert {w.rsplit("-", 1)[0] for w in workers} == {"w-stream", "w-poll"}, workers
