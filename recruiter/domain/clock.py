"""Time, injected.

Every process takes ``now`` from a :class:`Clock` instead of calling
``datetime.now()`` in its loops. Production processes use ``store.clock.ServerClock``,
which follows the MongoDB server's clock (``hello.localTime``), so leases,
heartbeats and schedules are compared on one time line even when the machines
running workers disagree about the time. Tests use :class:`ManualClock`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol


def utc(dt: datetime) -> datetime:
    """``dt`` as an aware UTC datetime truncated to milliseconds, as BSON stores it."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    dt = dt.astimezone(UTC)
    return dt.replace(microsecond=dt.microsecond // 1000 * 1000)


# How far ahead of its reader's clock a date a process stored (a heartbeat, a token bucket) is believed.
# Every process's clock follows the server's (store.clock.ServerClock), so what one process wrote
# at its ``now`` is within milliseconds of another's; a tool or a host on its own clock may be off
# by minutes, or hours across a wrong time zone (a beat an hour ahead is still taken as live).
# A date further ahead than this no process of this code wrote at its own ``now``: a hand edit, a
# host whose clock is years off, ``datetime(9999, 12, 31)``. Believed, it would stop progress until
# that date (a dead worker live, a rate limit never refilled), so it is malformed: set aside, with
# a warning, and never waited for.
MAX_AHEAD = timedelta(days=1)


def too_far_ahead(when: datetime, now: datetime, allowed: timedelta = MAX_AHEAD) -> bool:
    """Whether the stored date ``when`` is further ahead of ``now`` than ``allowed`` (:data:`MAX_AHEAD`)."""
    return when > now + allowed


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
