"""The overview's figures cache (recruiter.web.Cached): one read per period, one at a time, however many callers."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from recruiter.web import Cached
from tests.conftest import wait_for


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_value_is_read_once_per_period() -> None:
    clock, reads = Clock(), []

    def load() -> int:
        reads.append(clock.now)
        return len(reads)

    cache = Cached(load, ttl_s=2.0, clock=clock)
    assert [cache.get() for _ in range(5)] == [1] * 5
    clock.now = 1.9
    assert cache.get() == 1
    clock.now = 2.0
    assert cache.get() == 2
    cache.invalidate()
    assert cache.get() == 3
    assert cache.loads == 3


def test_a_slow_read_stretches_the_period() -> None:
    clock = Clock()

    def slow() -> float:
        clock.now += 10.0  # the read takes 10 s
        return clock.now

    cache = Cached(slow, ttl_s=2.0, clock=clock)
    first = cache.get()
    assert cache.period_s == 40.0
    clock.now += 39.0
    assert cache.get() == first
    clock.now += 1.0
    assert cache.get() != first


def test_callers_during_a_read_get_the_previous_value_and_the_first_read_is_shared() -> None:
    release = threading.Event()
    started = threading.Event()
    calls = []

    def load() -> int:
        calls.append(1)
        started.set()
        release.wait(10)
        return len(calls)

    clock = Clock()
    cache = Cached(load, ttl_s=1.0, clock=clock)
    with ThreadPoolExecutor(8) as pool:
        firsts = [pool.submit(cache.get) for _ in range(8)]
        started.wait(10)
        release.set()
        assert [f.result(10) for f in firsts] == [1] * 8  # one read, shared
        release.clear()
        started.clear()
        clock.now = 5.0
        refresher = pool.submit(cache.get)
        started.wait(10)
        wait_for(lambda: len(calls) == 2, timeout_s=10, message="the second read to start")
        assert [pool.submit(cache.get).result(10) for _ in range(5)] == [1] * 5  # stale, at once
        release.set()
        assert refresher.result(10) == 2
    assert cache.loads == 2
    assert cache.get() == 2
