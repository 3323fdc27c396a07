"""Job classes of the named-workflow tests; workers import them as ``tests.named_workables``."""

from __future__ import annotations

from recruiter import JobContext, Workable
from tests.workables import ledger, note


class FailsFirst(Workable):
    """Fails the first time a job of this ``key`` starts, then returns ``key`` (a retried step succeeds)."""

    def __init__(self, ledger_uri: str, key: str) -> None:
        self.ledger_uri = ledger_uri
        self.key = key

    def execute(self, ctx: JobContext) -> str:
        note(self.ledger_uri, ctx, "start", key=self.key, after=list(ctx.after))
        if ledger(self.ledger_uri).count_documents({"key": self.key, "event": "start"}) == 1:
            raise ValueError(f"{self.key} fails the first time")
        return self.key
