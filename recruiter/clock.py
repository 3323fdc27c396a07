"""Time, injected.

Every process takes ``now`` from a :class:`Clock` instead of calling
``datetime.now()`` in its loops. Production processes use :class:`ServerClock`,
which follows the MongoDB server's clock (``hello.localTime``), so leases,
heartbeats and schedules are compared on one time line even when the machines
running workers disagree about the time. Tests use :class:`ManualClock`.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol


def utc(dt: datetime) -> datetime:
    """``dt`` as an aware UTC datetime truncated to milliseconds, as BSON stores it."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    dt = dt.astimezone(UTC)
    return dt.replace(microsecond=dt.microsecond // 1000 * 1000)


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    """The local clock, in UTC."""

    def now(self) -> datetime:
        return utc(datetime.now(UTC))


class ManualClock:
    """A clock that moves only when told to; for tests."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = utc(start or datetime(2026, 1, 1, tzinfo=UTC))

    def now(self) -> datetime:
        return self._now

    def advance(self, delta: timedelta) -> None:
        self._now = utc(self._now + delta)

    def set(self, when: datetime) -> None:
        self._now = utc(when)


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

    def calibrate_sync(self, client: Any) -> None:
        sent = time.monotonic()
        hello = client.admin.command("hello")
        self.observe(hello["localTime"], sent, time.monotonic())

    async def calibrate(self, client: Any) -> None:
        sent = time.monotonic()
        hello = await client.admin.command("hello")
        self.observe(hello["localTime"], sent, time.monotonic())
