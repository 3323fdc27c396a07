"""Job classes for the tests that follow jobs to their results (workers import them as
``tests.following_jobs``). They write nothing: what they return or raise is the result."""

from __future__ import annotations

from recruiter import Workable
from recruiter.retry import RetryManyTimes


class Square(Workable):
    """Returns ``{"n": n, "square": n * n}``."""

    def __init__(self, n: int) -> None:
        self.n = n

    def execute(self) -> dict[str, int]:
        return {"n": self.n, "square": self.n * self.n}


class RefuseInput(Workable):
    """Fails on every attempt; tried twice, then archived as ``tried-too-many-times``."""

    retry_policy = RetryManyTimes(times=1)

    def __init__(self, n: int) -> None:
        self.n = n

    def execute(self) -> None:
        check_input(self.n)


def check_input(n: int) -> None:
    raise ValueError(f"bad input {n}")
