"""A job class for ``recruiter jobs retry`` scenarios; workers import it as ``tests.retry_workables``.

:class:`FailsUntilAllowed` fails until the test writes ``{_id: key, allowed: true}``
in the ``flags`` collection of the test's database, then returns its ``n``: a job
that ends ``tried-too-many-times`` and succeeds once retried after the fix.
"""

from __future__ import annotations

from recruiter import JobContext, Workable
from recruiter.retry import RetryManyTimes
from tests.workables import ledger, note


def allow(uri: str, key: str) -> None:
    ledger(uri).database["flags"].update_one({"_id": key}, {"$set": {"allowed": True}}, upsert=True)


class FailsUntilAllowed(Workable):
    retry_policy = RetryManyTimes(1, "10ms")  # two attempts, then tried-too-many-times

    def __init__(self, ledger_uri: str, key: str, n: int = 0) -> None:
        self.ledger_uri = ledger_uri
        self.key = key
        self.n = n

    def execute(self, ctx: JobContext) -> int:
        note(self.ledger_uri, ctx, "start", n=self.n)
        flag = ledger(self.ledger_uri).database["flags"].find_one({"_id": self.key})
        if not (flag and flag.get("allowed")):
            raise RuntimeError(f"{self.key} is not allowed yet")
        return self.n
