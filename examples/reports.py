"""Reporting jobs (group ``reports``): an ``async def execute`` job.

A worker runs an async ``execute`` on its own event loop, so one worker process
started with ``--concurrency N`` can run N of them at once without threads.
The warehouse turns away the first try of every March report; the job's
:class:`~recruiter.retry.RetryManyTimes` policy runs it again 300 ms later.
"""

from __future__ import annotations

import asyncio
import zlib

from recruiter import JobContext, Workable
from recruiter.retry import RetryManyTimes


class WarehouseBusy(Exception):
    """The data warehouse refused the query because it is overloaded."""


# Two more tries, 300 ms apart.
RETRY_TWICE = RetryManyTimes(times=2, wait="300ms")


class BuildMonthlyReport(Workable):
    """Aggregate a month of data for a customer and return a small summary."""

    def __init__(self, customer: str, month: str) -> None:
        self.customer = customer
        self.month = month

    async def execute(self, ctx: JobContext) -> dict[str, object]:
        # A stable pseudo-random number: the same report always behaves the same
        # (str hashes change from one process to the next; CRC32 does not).
        seed = zlib.crc32(f"{self.customer}/{self.month}".encode())
        await asyncio.sleep(0.1 + (seed % 20) / 100)  # 100 to 290 ms of "querying"
        if self.month.endswith("-03") and ctx.attempt == 1:
            # Quarter-end rush: the first try of every March report is turned away.
            raise WarehouseBusy(f"warehouse busy with quarter-end queries; {self.customer}/{self.month} must wait")
        return {"customer": self.customer, "month": self.month, "rows": seed % 1000}
