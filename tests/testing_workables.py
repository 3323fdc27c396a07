"""Workables for the tests of recruiter.testing (importable by name, as jobs must be)."""

from __future__ import annotations

import asyncio
import logging

import structlog

from recruiter import JobContext, Workable
from recruiter.retry import RetriableExceptionFilter, RetryManyTimes

log = logging.getLogger("tests.testing_workables")


class Flaky(Exception):
    pass


class FailsTwice(Workable):
    """Fails its first two attempts; RetryManyTimes(3, 10 minutes) as its class default."""

    retry_policy = RetryManyTimes(times=3, wait="10m")

    def __init__(self, name: str) -> None:
        self.name = name

    def execute(self, ctx: JobContext) -> str:
        log.info("attempt %d of %s", ctx.attempt, self.name)
        print(f"printed in attempt {ctx.attempt}")
        structlog.get_logger("tests.structlog").info("structured", attempt=ctx.attempt)
        ctx.progress(ctx.attempt / 3, f"attempt {ctx.attempt}")
        if ctx.attempt < 3:
            raise Flaky(f"flaky {ctx.attempt}")
        return f"{self.name} on {ctx.worker_id} in {ctx.group}"


class OnlyFlakyRetried(Workable):
    retry_policy = RetriableExceptionFilter(RetryManyTimes(5), exceptions=[Flaky])

    def execute(self) -> None:
        raise KeyError("not retriable")


class AsyncDoubles(Workable):
    def __init__(self, n: int) -> None:
        self.n = n

    async def execute(self, ctx: JobContext) -> dict[str, int]:
        await asyncio.sleep(0)
        ctx.progress(1.0)
        return {"n": self.n * 2, "attempt": ctx.attempt}


class AsyncSlow(Workable):
    timeout_s = 0.05

    async def execute(self) -> None:
        await asyncio.sleep(30)


class Tupled(Workable):
    """Its parameter comes back from BSON as a list, as a worker would see it."""

    def __init__(self, pair: tuple[int, int]) -> None:
        self.pair = pair

    def execute(self) -> str:
        return type(self.pair).__name__


class Unstorable(Workable):
    def execute(self) -> object:
        return {1, 2}


class BadProgress(Workable):
    def execute(self, ctx: JobContext) -> None:
        ctx.progress(2.0)
