"""What an assignment carries for each job: the job, or a reference when it is too big
or the round's copies are already at their budget (issue 9, part 4)."""

from __future__ import annotations

from typing import Any

import bson
from bson import ObjectId
from hypothesis import given
from hypothesis import strategies as st

from recruiter.domain.selection import Assignment
from recruiter.processes.rounds import MAX_JOB_COPY_BYTES, MAX_ROUND_COPY_BYTES, Locked, copies_to_send, handed_out
from recruiter.store.wakeup import NOT_COPIED, is_copy, job_reference

KIB = 1024


def locked(size: int, worker: str) -> Locked:
    """A locked job whose document is about ``size`` bytes."""
    token = ObjectId()
    job: dict[str, Any] = {"_id": ObjectId(), "lock_token": token, "locked": True, "payload": "x" * size}
    return Locked(Assignment(worker, job["_id"]), token, job)


def test_small_jobs_are_copied_and_big_ones_referenced() -> None:
    jobs = [locked(KIB, "a"), locked(MAX_JOB_COPY_BYTES + 1, "b"), locked(1024 * KIB, "c")]
    small, big, huge = copies_to_send(jobs)
    assert small is jobs[0].job
    assert is_copy(small)
    for lk, ref in ((jobs[1], big), (jobs[2], huge)):
        assert ref == {"_id": lk.assignment.job_id, "lock_token": lk.token, NOT_COPIED: True}
        assert not is_copy(ref)


def test_a_round_of_many_jobs_just_under_the_copy_limit_stays_under_its_budget() -> None:
    jobs = [locked(MAX_JOB_COPY_BYTES - KIB, f"w{i}") for i in range(300)]  # 18 MiB if all were copied
    sent = copies_to_send(jobs)
    copied = [s for s in sent if is_copy(s)]
    assert 0 < len(copied) < len(jobs)
    assert sum(len(bson.encode(s)) for s in copied) <= MAX_ROUND_COPY_BYTES
    assert copied == [lk.job for lk in jobs[:len(copied)]], "the first jobs are copied, in order"
    assert sent[len(copied):] == [job_reference(lk.assignment.job_id, lk.token) for lk in jobs[len(copied):]]


@given(st.lists(st.integers(1, 3 * MAX_JOB_COPY_BYTES), max_size=120))
def test_every_job_gets_its_copy_or_its_reference_within_the_budget(sizes: list[int]) -> None:
    jobs = [locked(size, f"w{i}") for i, size in enumerate(sizes)]
    sent = copies_to_send(jobs)
    assert len(sent) == len(jobs)
    total = 0
    for lk, s in zip(jobs, sent, strict=True):
        assert s["_id"] == lk.assignment.job_id
        assert s["lock_token"] == lk.token
        if is_copy(s):
            assert s is lk.job
            assert len(bson.encode(s)) <= MAX_JOB_COPY_BYTES
            total += len(bson.encode(s))
    assert total <= MAX_ROUND_COPY_BYTES


def test_workers_get_jobs_without_their_history_and_the_recruiter_keeps_it_whole() -> None:
    """Earlier attempts' traces and logs never travel to a worker; the archive still gets them."""
    history = [{"attempt": i, "outcome": "failed", "logs": "l" * (8 * KIB), "trace": "t"} for i in range(1, 6)]
    jobs = [locked(KIB, "a"), locked(KIB, "b")]
    jobs[0].job.update(executions=history, last_execution=history[-1])
    with_history, plain = copies_to_send(jobs)
    assert with_history == {k: v for k, v in jobs[0].job.items() if k not in ("executions", "last_execution")}
    assert plain is jobs[1].job  # nothing to leave out: the job itself
    assert jobs[0].job["executions"] == history, "the locked job is not changed"
    # The copy's size decides: a job copied only because its history was left out.
    big_history = locked(KIB, "c")
    big_history.job["executions"] = [{"logs": "l" * MAX_JOB_COPY_BYTES}]
    assert is_copy(copies_to_send([big_history])[0])
    # What the recruiter remembers for archiving is the whole job, for the copies that were assigned.
    remembered = handed_out([*jobs, big_history], [with_history, plain, job_reference(ObjectId(), ObjectId())],
                            {"a", "c"})
    assert remembered == {jobs[0].assignment.job_id: jobs[0].job}
    assert remembered[jobs[0].assignment.job_id]["executions"] == history
