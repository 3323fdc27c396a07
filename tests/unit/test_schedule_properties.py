"""Properties of the slots of periodic jobs (issue 15, item 1): cronsim's next-fire
computation across DST changes in two timezones (Europe/Rome and America/New_York,
the skipped hour and the repeated hour), monotonic slots, ``every`` slots anchored
on the epoch, and our own rules for catch-up, overlap and jitter."""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from recruiter.domain.schedules import (
    EPOCH,
    CatchUp,
    Definition,
    define,
    jitter_of,
    next_slot,
    plan_firing,
)

ZONES = ["Europe/Rome", "America/New_York"]
# The DST changes of 2026: (zone, day, the skipped or repeated local hour).
SPRING = {"Europe/Rome": date(2026, 3, 29), "America/New_York": date(2026, 3, 8)}
AUTUMN = {"Europe/Rome": date(2026, 10, 25), "America/New_York": date(2026, 11, 1)}
CHANGE_HOUR = {"Europe/Rome": {"spring": 2, "autumn": 2}, "America/New_York": {"spring": 2, "autumn": 1}}

zones = st.sampled_from(ZONES)
# Instants within two days of a DST change, and anywhere in 2026.
near_change = st.builds(
    lambda zone, spring, minutes: (zone, datetime.combine(SPRING[zone] if spring else AUTUMN[zone],
                                                          datetime.min.time(), UTC) + timedelta(minutes=minutes)),
    zones, st.booleans(), st.integers(-2 * 1440, 2 * 1440))
instants = st.datetimes(min_value=datetime(2025, 1, 1), max_value=datetime(2027, 12, 31),
                        timezones=st.just(UTC))


def cron(expr: str, tz: str = "UTC", **kw: object) -> Definition:
    return define("p", cron=expr, tz=tz, job={}, **kw)  # type: ignore[arg-type]


def slots(defn: Definition, after: datetime, n: int) -> list[datetime]:
    out: list[datetime] = []
    for _ in range(n):
        nxt = next_slot(defn, out[-1] if out else after)
        assert nxt is not None
        out.append(nxt)
    return out


@settings(max_examples=150, deadline=None)
@given(near_change, st.sampled_from(["30 2 * * *", "0 1 * * *", "15 3 * * *", "*/15 * * * *", "0 */2 * * *",
                                     "45 * * * *", "0 0 * * 1"]))
def test_slots_are_strictly_increasing(start: tuple[str, datetime], expr: str) -> None:
    zone, at = start
    got = slots(cron(expr, zone), at, 12)
    assert got[0] > at
    assert all(a < b for a, b in itertools.pairwise(got))


@settings(max_examples=150, deadline=None)
@given(zones, st.booleans(), st.integers(0, 59), st.sampled_from([0, 1, 2, 3, 4]))
def test_a_daily_time_fires_once_a_day_across_dst(zone: str, spring: bool, minute: int, hour: int) -> None:
    """A fixed daily time fires exactly once on every local day around a change: in the
    skipped hour at the transition (the first minute that exists), in the repeated hour
    once (the first pass)."""
    tz = ZoneInfo(zone)
    day = SPRING[zone] if spring else AUTUMN[zone]
    start = datetime.combine(day - timedelta(days=3), datetime.min.time(), tz).astimezone(UTC) - timedelta(minutes=1)
    got = [s.astimezone(tz) for s in slots(cron(f"{minute} {hour} * * *", zone), start, 6)]
    assert [s.date() for s in got] == [day - timedelta(days=3 - i) for i in range(6)]
    for s in got:
        wall = datetime.combine(s.date(), datetime.min.time()).replace(hour=hour, minute=minute)
        local = wall.replace(tzinfo=tz)
        exists = local.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall
        if exists:  # the first pass of a repeated time: fold 0, the earlier instant
            assert s.replace(tzinfo=None) == wall
            assert s.utcoffset() == local.replace(fold=0).utcoffset()
        else:  # skipped: fires at the transition
            assert spring
            assert s.date() == day
            assert s.hour == CHANGE_HOUR[zone]["spring"] + 1
            assert s.minute == 0


@settings(max_examples=150, deadline=None)
@given(near_change, st.sampled_from([1, 5, 15, 30]))
def test_star_expressions_run_on_real_time_across_dst(start: tuple[str, datetime], step: int) -> None:
    """``*/N * * * *`` keeps its slots N minutes apart in real time: no wall time of the
    skipped hour fires, both passes of the repeated hour fire."""
    zone, at = start
    got = slots(cron(f"*/{step} * * * *", zone), at, 200 // step + 10)
    assert all(b - a == timedelta(minutes=step) for a, b in itertools.pairwise(got))


@settings(max_examples=200, deadline=None)
@given(instants, st.integers(1, 86_400 * 2), st.integers(0, 10_000_000))
def test_every_slots_are_anchored_on_the_epoch(after: datetime, every_s: int, shift_ms: int) -> None:
    defn = define("p", every=timedelta(seconds=every_s), job={})
    slot = next_slot(defn, after)
    assert slot is not None
    assert after < slot <= after + timedelta(seconds=every_s)
    assert (slot - EPOCH) % timedelta(seconds=every_s) == timedelta(0)
    # Any recruiter, from any instant of the same interval, computes the same slot.
    other = slot - timedelta(milliseconds=shift_ms % (every_s * 1000) + 1)
    assert next_slot(defn, other) == slot


catch_ups = st.one_of(st.just(CatchUp("none")), st.builds(lambda n: CatchUp("all", n), st.integers(1, 12)),
                      st.builds(lambda s: CatchUp("within", 10, float(s)), st.integers(1, 3600)))


@settings(max_examples=300, deadline=None)
@given(catch_ups, st.sampled_from(["skip", "allow"]), st.booleans(), st.integers(0, 40), st.integers(0, 59_999),
       st.integers(0, 30))
def test_catch_up_and_overlap_rules(catch_up: CatchUp, overlap: str, running: bool, missed: int, extra_ms: int,
                                    jitter_s: int) -> None:
    defn = Definition("p", None, 60.0, "UTC", {}, overlap, catch_up, float(jitter_s))
    first = datetime(2026, 1, 1, tzinfo=UTC)
    now = first + timedelta(minutes=missed, milliseconds=extra_ms)
    plan = plan_firing(defn, first, now, running)
    passed = [first + timedelta(minutes=i) for i in range(missed + 1)
              if first + timedelta(minutes=i) + jitter_of(defn, first + timedelta(minutes=i)) <= now]
    # Every passed slot is fired or skipped, never both; the next slot is the first not passed.
    assert sorted(plan.fire + [s for s, _ in plan.skip]) == passed
    assert not set(plan.fire) & {s for s, _ in plan.skip}
    assert plan.next_slot == (passed[-1] + timedelta(minutes=1) if passed else first)
    if running and overlap == "skip":
        assert plan.fire == []
        assert all(r == "overlap" for _, r in plan.skip)
        return
    assert all(r == "catch-up" for _, r in plan.skip)
    if catch_up.mode == "none":
        assert plan.fire == passed[-1:]
    elif catch_up.mode == "all":
        assert plan.fire == passed[-catch_up.limit:]
    else:
        assert plan.fire == [s for s in passed if s >= now - timedelta(seconds=catch_up.within_s or 0)][-10:]


@given(st.integers(1, 3600), instants)
def test_jitter_is_deterministic_and_bounded(jitter_s: int, slot: datetime) -> None:
    defn = define("p", every="1h", job={}, jitter=timedelta(seconds=jitter_s) - timedelta(milliseconds=1))
    j = jitter_of(defn, slot)
    assert j == jitter_of(defn, slot)  # repeated rounds compute the same fire time
    assert timedelta(0) <= j < timedelta(seconds=jitter_s)
