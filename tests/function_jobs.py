"""Functions made jobs by ``@recruiter.job``, used by the tests; workers import them as ``tests.function_jobs``."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from recruiter import JobContext, job
from recruiter.retry import RetryManyTimes


@job(group="billing", retry_policy=RetryManyTimes(3, wait=0), timeout=timedelta(minutes=1),
     unique_key=lambda invoice_id, /, amount=1, **_: f"invoice-{invoice_id}")
def send_invoice(invoice_id: str, /, amount: int = 1, *, copy_to: str | None = None,
                 **extra: str) -> dict[str, object]:
    """Sends one invoice."""
    return {"invoice": invoice_id, "amount": amount, "copy_to": copy_to, "extra": extra}


@job
async def ping(ctx: JobContext, n: int) -> str:
    await asyncio.sleep(0)
    return f"pong {n} in {ctx.group}, attempt {ctx.attempt}"


@job(retry_policy=RetryManyTimes(2, wait=0))
def flaky(ctx: JobContext, fail_times: int) -> int:
    if ctx.attempt <= fail_times:
        raise RuntimeError(f"attempt {ctx.attempt} fails")
    return ctx.attempt


@job(at_most_once=True, group="once")
def plain() -> None:
    pass


def undecorated(n: int) -> int:
    return n


renamed = job(undecorated)  # its stored name, tests.function_jobs:undecorated, names the plain function
