"""What an assignment carries for each job: the job, or a reference when it is too big
or the round's copies are already at their budget (issue 9, part 4)."""

from __future__ import annotations

from typing import Any

import bson
from bson import ObjectId
from hypothesis import given
from hypothesis import strategies as st

from recruiter.domain.selection import Assignment
from recruiter.processes.rounds import MAX_JOB_COPY_BYTES, MAX_ROUND_COPY_BYTES, Locked, copies_to_send
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
