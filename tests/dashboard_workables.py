"""Job classes of the dashboard's browser tests (workers import them as ``tests.dashboard_workables``)."""

from __future__ import annotations

from recruiter import JobContext, Workable
from tests.workables import note, released


class FailsUntilReleased(Workable):
    """Prints a line, then fails until the test releases ``key`` in the ledger; succeeds afterwards."""

    def __init__(self, ledger_uri: str, key: str) -> None:
        self.ledger_uri = ledger_uri
        self.key = key

    def execute(self, ctx: JobContext) -> str:
        print(f"checking whether {self.key} is released (attempt {ctx.attempt})")
        note(self.ledger_uri, ctx, "start", key=self.key)
        if not released(self.ledger_uri, self.key):
            raise RuntimeError(f"{self.key} is not released yet")
        note(self.ledger_uri, ctx, "end", key=self.key)
        return self.key
