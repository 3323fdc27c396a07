"""The chaos test's job: short, long, failing, or ending its process, and always in the ledger."""

from __future__ import annotations

import os
import time

from recruiter import JobContext, Workable
from tests.workables import note


class ChaosJob(Workable):
    def __init__(self, ledger_uri: str, kind: str, seconds: float = 0.0) -> None:
        self.ledger_uri = ledger_uri
        self.kind = kind  # short | long | fail | exit
        self.seconds = seconds

    def execute(self, ctx: JobContext) -> str:
        note(self.ledger_uri, ctx, "start", kind=self.kind)
        if self.kind == "exit":
            os._exit(17)  # as a segfault or an OOM kill would: no outcome, no goodbye
        if self.seconds:
            time.sleep(self.seconds)
        note(self.ledger_uri, ctx, "end", kind=self.kind)
        if self.kind == "fail":
            raise ValueError("chaos: this job fails every time")
        return self.kind
