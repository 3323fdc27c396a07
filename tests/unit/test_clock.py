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


class _Hello:
    """A server whose ``hello`` answers ``localTime`` (truncated to the millisecond, as dates are)
    after ``delays_s``, one per call: the first slow, as a new connection's is."""

    def __init__(self, delays_s: list[float]) -> None:
        self.delays_s = delays_s
        self.admin = self

    def command(self, name: str) -> dict[str, datetime]:
        assert name == "hello"
        delay = self.delays_s.pop(0)
        time.sleep(delay)  # the reply leaves the server at once: all the delay is before the reading
        now = datetime.now(UTC)
        return {"localTime": now.replace(microsecond=now.microsecond // 1000 * 1000)}


def test_a_calibration_keeps_the_reading_of_the_shortest_round_trip() -> None:
    # The first reading waits 60 ms before the server reads its clock (a connection opened,
    # a busy server): its middle is 30 ms off. The quick ones that follow are kept.
    clock = ServerClock()
    clock.calibrate_sync(_Hello([0.06, 0.001, 0.001, 0.001]))  # type: ignore[arg-type]
    assert abs(clock.now() - datetime.now(UTC)) < timedelta(milliseconds=5)
    one = ServerClock()
    sent = time.monotonic()
    reading = _Hello([0.06]).command("hello")["localTime"]
    one.observe(reading, sent, time.monotonic())
    assert one.now() - datetime.now(UTC) > timedelta(milliseconds=20), "a single slow reading is that far off"
