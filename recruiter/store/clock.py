"""The server's clock: the time line every process compares leases, heartbeats and schedules on.

It reads ``hello.localTime`` from the server, so it lives in the store; the
:class:`~recruiter.domain.clock.Clock` protocol it satisfies is in the domain.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from recruiter.domain.clock import SystemClock, utc
from recruiter.store.layout import AsyncClient, SyncClient

# Readings of the server's time per calibration; the one of the shortest round trip is kept.
SAMPLES = 4


class ServerClock:
    """The server's clock, estimated as local monotonic time plus a measured offset.

    ``calibrate`` reads ``hello.localTime`` :data:`SAMPLES` times and keeps the reading
    with the shortest round trip, taking its middle as the instant it was read and the
    middle of the millisecond the server gives (dates are truncated to it). The error is
    at most half that round trip: the first command of a new client also opens its
    connection, and one taken while the server is busy waits in its queue, so a single
    reading was off by several milliseconds, which every ``started_at`` less another
    process's ``scheduled_at`` then carried. Processes recalibrate periodically.
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

    def _best(self, readings: list[tuple[datetime, float, float]]) -> None:
        """Observe the reading of the shortest round trip, in the middle of its millisecond."""
        server_time, sent, received = min(readings, key=lambda r: r[2] - r[1])
        if server_time.microsecond % 1000 == 0:  # truncated to the millisecond: its middle
            server_time += timedelta(microseconds=500)
        self.observe(server_time, sent, received)

    def now(self) -> datetime:
        if not self._calibrated:
            return SystemClock().now()
        return utc(datetime.fromtimestamp(time.monotonic() + self._offset_s, UTC))

    def calibrate_sync(self, client: SyncClient, samples: int = SAMPLES) -> None:
        readings = []
        for _ in range(samples):
            sent = time.monotonic()
            hello = client.admin.command("hello")
            readings.append((hello["localTime"], sent, time.monotonic()))
        self._best(readings)

    async def calibrate(self, client: AsyncClient) -> None:
        readings = []
        for _ in range(SAMPLES):
            sent = time.monotonic()
            hello = await client.admin.command("hello")
            readings.append((hello["localTime"], sent, time.monotonic()))
        self._best(readings)
