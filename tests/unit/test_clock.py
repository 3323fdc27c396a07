"""ServerClock: processes on machines with skewed clocks still agree on the server's time."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from recruiter.store.clock import ServerClock


def test_two_skewed_machines_read_the_same_server_time() -> None:
    server_now = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    clocks = []
    for _ in range(2):  # the local wall clock plays no part: only the observation and monotonic time
        clock = ServerClock()
        sent = time.monotonic()
        clock.observe(server_now, sent, sent + 0.010)  # a 10 ms round trip, read in its middle
        clocks.append(clock)
    a, b = (c.now() for c in clocks)
    assert abs(a - b) < timedelta(milliseconds=50)
    assert abs(a - server_now) < timedelta(seconds=1), "follows the server, not the local clock (2026-11 here)"


def test_an_uncalibrated_clock_falls_back_to_the_local_clock() -> None:
    clock = ServerClock()
    assert not clock.calibrated
    assert abs(clock.now() - datetime.now(UTC)) < timedelta(seconds=1)
