"""A user's function jobs, type-checked with ``mypy --strict`` by tests/unit/test_function_jobs.py:
every call here is right, and the handles have the types the recruiter's ``enqueue`` gives."""

from __future__ import annotations

from collections.abc import Coroutine
from datetime import timedelta
from typing import Any, assert_type

from recruiter import AsyncJobHandle, AsyncRecruiter, JobBuilder, JobContext, JobHandle, Recruiter, job
from recruiter.retry import ExponentialBackoff, RetryManyTimes
from recruiter.testing import Inline, InlineResult, run_inline


@job(group="billing", retry_policy=ExponentialBackoff(times=5, initial=timedelta(seconds=1)))
def send_invoice(invoice_id: str, *, copy_to: str | None = None) -> dict[str, str]:
    return {"sent": invoice_id}


@job
async def ping(ctx: JobContext, n: int) -> str:
    return f"pong {n} on attempt {ctx.attempt}"


def produce(rec: Recruiter) -> object:
    handle = send_invoice.enqueue(rec, "INV-1", copy_to="ops@example.com")
    assert_type(handle, JobHandle)
    builder = send_invoice.job(rec, "INV-2")
    assert_type(builder, JobBuilder[JobHandle])
    assert_type(builder.schedule_in(minutes=5).enqueue(), JobHandle)
    assert_type(ping.enqueue(rec, 3), JobHandle)
    assert_type(send_invoice("INV-3"), dict[str, str])
    rec.enqueue_many([send_invoice.workable("INV-4"), ping.workable(n=4)])
    return handle.wait(timeout=10)


async def produce_async(rec: AsyncRecruiter) -> object:
    handle = await send_invoice.enqueue(rec, "INV-5")
    assert_type(handle, AsyncJobHandle)
    assert_type(await ping.job(rec, 5).with_priority("high").enqueue(), AsyncJobHandle)
    called: Coroutine[Any, Any, str] = ping(JobContext("j", 1, "w", "g"), 6)
    called.close()
    return await handle.wait(timeout=10)


def test_inline() -> None:
    assert_type(send_invoice.job(Inline(), "INV-6").retry_with(RetryManyTimes(2)).enqueue(), InlineResult)
    assert run_inline(ping.workable(7)).result == "pong 7 on attempt 1"
