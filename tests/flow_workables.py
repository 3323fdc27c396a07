"""Job classes of the workflow tests (chains, fan-in); workers import them as ``tests.flow_workables``.

Each notes in the test's ``ledger`` when it starts and ends; ``Sum`` reads the results of
the jobs it waited for (``ctx.after``) from ``archived`` and returns their total.
"""

from __future__ import annotations

import time
from typing import Any

from bson import ObjectId

from recruiter import JobContext, Workable
from tests.workables import ledger, note


class Step(Workable):
    """Returns ``n`` after ``sleep_s`` (the first time it starts only: a test may kill its worker then;
    a job given back unproven runs its same attempt again, so the ledger counts the starts)."""

    def __init__(self, ledger_uri: str, n: int = 0, sleep_s: float = 0.0) -> None:
        self.ledger_uri = ledger_uri
        self.n = n
        self.sleep_s = sleep_s

    def execute(self, ctx: JobContext) -> int:
        note(self.ledger_uri, ctx, "start", n=self.n, after=list(ctx.after))
        if self.sleep_s and ledger(self.ledger_uri).count_documents({"job": ctx.job_id, "event": "start"}) == 1:
            time.sleep(self.sleep_s)
        note(self.ledger_uri, ctx, "end", n=self.n)
        return self.n


class Sum(Workable):
    """The total of the results of the jobs it waited for."""

    def __init__(self, ledger_uri: str, n: int = 0) -> None:
        self.ledger_uri = ledger_uri
        self.n = n

    def execute(self, ctx: JobContext) -> int:
        archived: Any = ledger(self.ledger_uri).database["archived"]
        ids = [ObjectId(i) for i in ctx.after]
        total = sum(d.get("result") or 0 for d in archived.find({"_id": {"$in": ids}}, {"result": 1}))
        note(self.ledger_uri, ctx, "start", n=self.n, after=list(ctx.after), total=total)
        note(self.ledger_uri, ctx, "end", n=self.n)
        return total


class ReadsResults(Workable):
    """Notes what ``ctx.dependency_results()`` says of each job it waited for, by id and by step."""

    def __init__(self, ledger_uri: str) -> None:
        self.ledger_uri = ledger_uri

    def execute(self, ctx: JobContext) -> int:
        results = ctx.dependency_results()
        seen = {key: {"why": r.why, "result": r.result, "dropped": r.dropped, "step": r.step}
                for key, r in [*results.items(), *results.steps().items()]}
        values = {}
        for key in results:
            try:
                values[key] = results.value(key)
            except LookupError as exc:
                values[key] = f"unavailable: {exc}"
        note(self.ledger_uri, ctx, "start", seen=seen, values=values)
        return len(results)


class Part(Workable):
    """Returns ``n`` and notes nothing: a fan-out's cheap part (the ledger is left to the final job)."""

    def __init__(self, n: int = 0) -> None:
        self.n = n

    def execute(self) -> int:
        return self.n
