# function_jobs.py: a job written as a typed function (recruiter.job).
from __future__ import annotations

from collections.abc import Callable

from recruiter import JobHandle, Recruiter, job
from recruiter.retry import RetryManyTimes


@job(group="myapp", retry_policy=RetryManyTimes(2))
def total_cents(invoice_ids: list[str], cents_each: int = 100) -> int:
    return len(invoice_ids) * cents_each


def enqueue_total(rec: Recruiter) -> JobHandle:
    return total_cents.enqueue(rec, ["INV-1", "INV-2", "INV-3"], cents_each=250)


EXAMPLES: list[tuple[Callable[[Recruiter], JobHandle], object]] = [
    (enqueue_total, 750),
]
