"""Job classes of the dynamic workflow tests (recruiter.domain.adding); workers import them as
``tests.dynamic_workables``. Each notes in the test's ``ledger`` when it runs."""

from __future__ import annotations

import asyncio
from typing import Any

from recruiter import JobContext, Workable
from recruiter.domain.retry import RetryManyTimes
from tests.flow_workables import Step, Sum
from tests.workables import ledger, note


class Spawner(Workable):
    """Adds ``parts`` children (``child-1``...) and, with ``join``, a step ``join`` summing them;
    ``hold``: the spawner's dependents wait for what it added."""

    def __init__(self, ledger_uri: str, parts: int = 3, join: bool = True, hold: bool = True) -> None:
        self.ledger_uri, self.parts, self.join, self.hold = ledger_uri, parts, join, hold

    def spawn(self, ctx: JobContext) -> int:
        names = ctx.workflow.fan_out("child", [Step(self.ledger_uri, n=k) for k in range(1, self.parts + 1)],
                                     hold_dependents=self.hold)
        if self.join:
            ctx.workflow.add("join", Sum(self.ledger_uri, n=100), deps=names, hold_dependents=self.hold)
        note(self.ledger_uri, ctx, "start", n=-1, added=len(names) + self.join)
        return -1

    def execute(self, ctx: JobContext) -> int:
        return self.spawn(ctx)


class AsyncSpawner(Spawner):
    async def execute(self, ctx: JobContext) -> int:  # type: ignore[override]
        await asyncio.sleep(0)
        return self.spawn(ctx)


class ChildSpawner(Spawner):
    """Runs in a child process (a timeout)."""

    timeout_s = 30


class SpawnsThenFailsOnce(Spawner):
    """Adds its steps, then fails its first attempt (retried once): only the second adds them."""

    retry_policy = RetryManyTimes(1)

    def execute(self, ctx: JobContext) -> int:
        value = self.spawn(ctx)
        if ledger(self.ledger_uri).count_documents({"job": ctx.job_id, "event": "start"}) == 1:
            raise RuntimeError("the first attempt fails after adding its steps")
        return value


class AddsNamed(Workable):
    """Adds one step ``name`` waiting for ``deps`` (to be refused by the round: a clash, an unknown dep)."""

    def __init__(self, ledger_uri: str, name: str, deps: list[str]) -> None:
        self.ledger_uri, self.name, self.deps = ledger_uri, name, deps

    def execute(self, ctx: JobContext) -> str:
        ctx.workflow.add(self.name, Step(self.ledger_uri, n=7), deps=self.deps)
        note(self.ledger_uri, ctx, "start")
        return "added"


class AddsOutsideAWorkflow(Workable):
    """Not a workflow's step: its ``add`` raises in its own code."""

    retry_policy = RetryManyTimes(0)

    def __init__(self, ledger_uri: str) -> None:
        self.ledger_uri = ledger_uri

    def execute(self, ctx: JobContext) -> Any:
        note(self.ledger_uri, ctx, "start")
        return ctx.workflow.add("child", Step(self.ledger_uri))


class Fans(Workable):
    """Adds ``parts`` children and a join, noting nothing (for ``run_inline``)."""

    def __init__(self, parts: int = 2, name: str = "join") -> None:
        self.parts, self.name = parts, name

    def execute(self, ctx: JobContext) -> int:
        names = ctx.workflow.fan_out("child", [Step("unused", n=k) for k in range(self.parts)])
        ctx.workflow.add(self.name, Sum("unused"), deps=names)
        return self.parts


class TampersWithItsSteps(Workable):
    """Adds a step, then rewrites what was kept of it (``how``): what a hostile job may hand back."""

    def __init__(self, ledger_uri: str, how: str) -> None:
        self.ledger_uri, self.how = ledger_uri, how

    def execute(self, ctx: JobContext) -> str:
        ctx.workflow.add("child", Step(self.ledger_uri))
        kept = ctx.workflow._added[0]  # the tampering under test
        if self.how == "deps":
            kept["deps"] = "not a list"
        elif self.how == "dollar":
            kept["job"]["workable"]["parameters"] = {"$where": "1"}
        elif self.how == "locked":
            kept["job"].update(locked=True, status="assigned", lock_token="forged")
        return self.how
