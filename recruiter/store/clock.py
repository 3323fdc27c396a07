"""The server's clock: the time line every process compares leases, heartbeats and schedules on.

It reads ``hello.localTime`` from the server, so it lives in the store; the
:class:`~recruiter.domain.clock.Clock` protocol it satisfies is in the domain.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from recruiter.domain.clock import SystemClock, utc
from recruiter.store.layout import AsyncClient, SyncClient


class ServerClock:
    """The server's clock, estimated as local monotonic time plus a measured offset.

    ``calibrate`` reads ``hello.localTime`` and takes the middle of the round trip as
    the instant it was read, so the error is at most half a round trip plus the
    server's millisecond rounding. Processes recalibrate periodically.
    """

    def __init__(self) -> None:
        self._offset_s = 0.0  # server_epoch_seconds - local monotonic seconds
        self._calibrated = False

    @property
    def calibrated(self) -> bool:
        return self._calibrated

    def observe(self, server_time: datetime, sent_monotonic: float, received_monotonic: float) -> None:
        middle = (sent_monotonic + received_monotonic) / 2
        self._offset_s = utc(server_time).timestamp() - middle
        self._calibrated = True

    def now(self) -> datetime:
        if not self._calibrated:
            return SystemClock().now()
        return utc(datetime.fromtimestamp(time.monotonic() + self._offset_s, UTC))

    def calibrate_sync(self, client: SyncClient) -> None:
        sent = time.monotonic()
        hello = client.admin.command("hello")
        self.observe(hello["localTime"], sent, time.monotonic())

    async def calibrate(self, client: AsyncClient) -> None:
        sent = time.monotonic()
        hello = await client.admin.command("hello")
        self.observe(hello["localTime"], sent, time.monotonic())
