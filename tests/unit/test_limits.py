"""Flow control in the pure selection (recruiter.domain.limits): examples, bad input, and properties
over simulated runs with random arrivals, workers, limits, finishing jobs and clock steps."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recruiter.domain.candidates import plan_round
from recruiter.domain.limits import Key, Limit, Limits, allowance, count_by_key, keys_of
from recruiter.domain.pacing import (
    Bucket,
    LimitState,
    Rate,
    start_times,
    state_document,
    state_from,
    state_sets,
    with_buckets,
)
from recruiter.domain.selection import (
    ANY_GROUP,
    Candidate,
    Cursor,
    FreeWorker,
    RoundPolicy,
    select,
)
from recruiter.domain.stored_limits import read_limits

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def job(job_id: int, group: str, tenant: str = "", seconds: float = 0) -> Candidate:
    return Candidate(job_id, group, T0 + timedelta(seconds=seconds), tenant)


def policy(limits: Limits, running: dict[Key, int] | None = None, now: datetime = T0) -> RoundPolicy:
    return RoundPolicy(allowance=allowance(limits, LimitState(), running or {}, now))


# -- parsing and bad input -----------------------------------------------------------------

@pytest.mark.parametrize(("text", "count", "per_s"), [
    ("5/s", 5, 1.0), ("100/m", 100, 60.0), ("1000/h", 1000, 3600.0), ("3/10s", 3, 10.0), (" 2 / d ", 2, 86400.0),
    ("7/0.5s", 7, 0.5),
])
def test_rates_parse(text: str, count: int, per_s: float) -> None:
    rate = Rate.parse(text)
    assert (rate.count, rate.per_s) == (count, per_s)


@pytest.mark.parametrize(("text", "why"), [
    ("5/x", "expected COUNT/UNIT"), ("0/s", "at least 1"), ("-5/s", "expected COUNT/UNIT"), ("5", "expected"),
    ("s/5", "expected"), ("5/0s", "interval must be positive"), ("", "expected"),
])
def test_bad_rates_are_one_line_errors(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why) as caught:
        Rate.parse(text)
    assert "\n" not in str(caught.value)


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="max_running 0"):
        Limit(max_running=0)
    with pytest.raises(ValueError, match="needs max_running, a rate"):
        Limit()
    with pytest.raises(ValueError, match="burst"):
        Rate.parse("5/s", burst=-1)


def test_a_malformed_stored_limit_is_set_apart_with_its_reason() -> None:
    stored = read_limits({"_id": "limits", "groups": {
        "ok": {"max_running": 3}, "bad": {"rate": "5/x"}, "worse": "no", "zero": {"max_running": 0},
        "typed": {"max_running": "3"}}, "tenants": {"ok": {"acme": {"rate": "2/s", "burst": 1}}, "x": 5}})
    limits, problems = stored.limits, stored.lines()
    assert set(limits.by_key) == {("ok", None), ("ok", "acme")}
    assert limits.by_key[("ok", "acme")].rate == Rate.parse("2/s", 1)
    assert set(stored.malformed()) == {("bad", None), ("worse", None), ("zero", None), ("typed", None)}
    assert len(problems) == 5
    assert all("\n" not in p for p in problems)
    assert read_limits("nonsense").lines() == ["document: expected an embedded document"]


def test_the_state_round_trips_and_a_malformed_one_starts_empty() -> None:
    state = LimitState({("a.b", None): Bucket(0.5, T0), ("g", ""): Bucket(1.0, T0), ("g", "$t"): Bucket(0, T0)})
    assert state_from({"limiter": state_document(state)}, T0) == (state, None)
    sets = state_sets({("a.b", None): Bucket(0.25, T0)})
    assert sets == {"limiter.groups.a%2Eb": {"t": 0.25, "at": T0}}
    broken, problem = state_from({"limiter": {"groups": {"a": {"t": -1, "at": T0}}}}, T0)
    assert problem is not None
    rate = Rate.parse("5/s", burst=3)
    assert broken.bucket(("a", None), rate, T0).tokens == 0  # no unearned burst after a malformed state
    assert LimitState().bucket(("a", None), rate, T0).tokens == 4  # a new limit starts full


def test_the_refill_never_goes_back_in_time_and_never_above_the_capacity() -> None:
    rate = Rate.parse("10/s", burst=2)
    b = Bucket(0.0, T0)
    assert b.refilled(rate, T0 - timedelta(hours=1)) == b  # clock stepped back: nothing gained
    assert b.refilled(rate, T0 + timedelta(milliseconds=255)).tokens == pytest.approx(2.5)  # slots of 102 ms
    assert b.refilled(rate, T0 + timedelta(days=3)).tokens == 3.0  # stepped forward: a full bucket at most


# -- examples --------------------------------------------------------------------------------

def test_a_capped_group_gets_what_its_cap_leaves_and_the_rest_go_elsewhere() -> None:
    limits = Limits({("pay", None): Limit(max_running=3)})
    workers = [FreeWorker(f"w{i}", (ANY_GROUP,)) for i in range(6)]
    jobs = [job(i, "pay") for i in range(10)] + [job(100 + i, "mail") for i in range(10)]
    chosen = select(workers, jobs, Cursor(), T0, policy(limits, running={("pay", None): 1}))
    groups = Counter("pay" if a.job_id < 100 else "mail" for a in chosen.assignments)
    assert groups == {"pay": 2, "mail": 4}  # 3 - 1 running; no worker idles


def test_a_limited_tenant_does_not_hold_back_its_group() -> None:
    limits = Limits({("g", "big"): Limit(rate=Rate.parse("1/m"))})
    workers = [FreeWorker(f"w{i}", ("g",)) for i in range(5)]
    jobs = [job(i, "g", "big") for i in range(10)] + [job(100 + i, "g", "small") for i in range(10)]
    chosen = select(workers, jobs, Cursor(), T0, policy(limits))
    tenants = Counter("big" if a.job_id < 100 else "small" for a in chosen.assignments)
    assert tenants == {"big": 1, "small": 4}


def test_a_paced_job_never_goes_to_a_lane_that_would_hold_it() -> None:
    limits = Limits({("g", None): Limit(rate=Rate.parse("100/s", burst=10))})
    lanes = [FreeWorker("w~1", ("g",), depth=1), FreeWorker("v", ("*",), depth=0)]
    chosen = select(lanes, [job(1, "g"), job(2, "g"), job(3, "other")], Cursor(), T0, policy(limits))
    assert {(a.worker_id, a.job_id) for a in chosen.assignments} == {("v", 1)}
    capped = Limits({("g", None): Limit(max_running=5)})  # a cap alone counts held jobs as running
    chosen = select(lanes, [job(1, "g"), job(2, "g")], Cursor(), T0, policy(capped))
    assert len(chosen.assignments) == 2


def test_the_reads_respect_the_caps() -> None:
    """A group whose limit allows nothing is not read; one that allows 2 is read for 2, not for 20."""
    limits = Limits({("pay", None): Limit(max_running=2), ("mail", None): Limit(max_running=1)})
    workers = [FreeWorker(f"w{i}", ("pay", "mail")) for i in range(20)]
    pol = policy(limits, running={("mail", None): 1})
    plan = plan_round(workers, Cursor(), T0, pol)
    queries = next(plan)
    assert {q.group for q in queries} == {"pay"}
    assert all(q.limit <= 2 for q in queries)


# -- properties over simulated runs ----------------------------------------------------------

GROUPS = ("a", "b", "c")
TENANTS = ("", "t1", "t2")


@st.composite
def limit_sets(draw: st.DrawFn) -> Limits:
    found: dict[Key, Limit] = {}
    for key in draw(st.lists(st.tuples(st.sampled_from(GROUPS), st.sampled_from((None, *TENANTS))),
                             max_size=4, unique=True)):
        cap = draw(st.none() | st.integers(1, 4))
        rate = draw(st.none() | st.builds(Rate, st.integers(1, 6), st.sampled_from([0.5, 1.0, 2.0]),
                                          st.integers(0, 3)))
        if cap is None and rate is None:
            cap = 1
        found[key] = Limit(cap, rate)
    return Limits(found)


@dataclass
class Run:
    limits: Limits
    workers: list[FreeWorker]
    starts: list[tuple[float, Candidate]] = field(default_factory=list)  # when each was handed out
    start_times: list[tuple[float, Candidate]] = field(default_factory=list)  # when each paced one starts
    max_running: Counter[Key] = field(default_factory=Counter)
    delayed_unlimited: list[str] = field(default_factory=list)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Limits, list[FreeWorker], list[tuple[float, list[Candidate], float]]]:
    limits = draw(limit_sets())
    workers = [FreeWorker(f"w{i}", tuple(draw(st.sampled_from([(ANY_GROUP,), ("a",), ("a", "b"), ("c",)]))))
               for i in range(draw(st.integers(1, 6)))]
    steps = []
    next_id = 0
    for _ in range(draw(st.integers(1, 25))):
        dt = draw(st.sampled_from([0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.7, 1.0, 5.0]))
        arrivals = []
        for _ in range(draw(st.integers(0, 5))):
            arrivals.append(job(next_id, draw(st.sampled_from(GROUPS)), draw(st.sampled_from(TENANTS))))
            next_id += 1
        steps.append((dt, arrivals, draw(st.floats(0, 1))))
    return limits, workers, steps


def simulate(limits: Limits, workers: list[FreeWorker],
             steps: list[tuple[float, list[Candidate], float]]) -> Run:
    """Rounds as the recruiter runs them: the allowance from the limits, the state of the last
    round and what runs; each round's spend kept; jobs finish at random between rounds."""
    out = Run(limits, workers)
    queue: dict[object, Candidate] = {}
    running: dict[str, Candidate] = {}  # worker -> job
    state, cursor, t = LimitState(), Cursor(), 0.0
    for dt, arrivals, finishing in steps:
        t += dt
        now = T0 + timedelta(seconds=t)
        queue.update({c.id: c for c in arrivals})
        for w in sorted(running)[: math.floor(len(running) * finishing)]:
            del running[w]
        counts = count_by_key(((c.group, c.tenant) for c in running.values()), limits)
        pol = RoundPolicy(allowance=allowance(limits, state, counts, now))
        free = [w for w in workers if w.id not in running]
        chosen = select(free, queue.values(), cursor, now, pol)
        cursor = chosen.cursor
        for a in chosen.assignments:
            c = queue.pop(a.job_id)
            running[a.worker_id] = c
            out.starts.append((t, c))
        handed = [running[a.worker_id] for a in chosen.assignments]
        starts, changed = start_times(limits.rates(), state, [keys_of(c.group, c.tenant) for c in handed], now)
        state = with_buckets(state, changed)
        out.start_times += [((at - T0).total_seconds(), c) for at, c in zip(starts, handed, strict=True)
                            if at is not None]
        counts = count_by_key(((c.group, c.tenant) for c in running.values()), limits)
        for key, n in counts.items():
            out.max_running[key] = max(out.max_running[key], n)
        after = allowance(limits, state, counts, now).remaining  # what the limits allow once the round is done
        idle = [w for w in free if w.id not in running]
        for c in queue.values():
            held = any(after.get(k) == 0 for k in _keys(c))
            if not held and any(w.takes(c.group) for w in idle):
                out.delayed_unlimited.append(f"job {c.id} ({c.group}/{c.tenant}) waited beside an idle worker")
    return out


def _keys(c: Candidate) -> tuple[Key, Key]:
    return (c.group, None), (c.group, c.tenant)


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_starts_never_exceed_the_rate_plus_burst_over_any_window(data: tuple) -> None:  # type: ignore[type-arg]
    limits, workers, steps = data
    run = simulate(limits, workers, steps)
    for key, lim in limits.by_key.items():
        if lim.rate is None:
            continue
        times = sorted(t for t, c in run.start_times if key in _keys(c))
        for i, start in enumerate(times):  # every window [start, start + interval) that begins at a start
            within = sum(1 for u in times[i:] if u < start + lim.rate.per_s - 1e-9)
            assert within <= lim.rate.count + lim.rate.burst, (key, lim, times)


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_running_jobs_never_exceed_max_running(data: tuple) -> None:  # type: ignore[type-arg]
    limits, workers, steps = data
    run = simulate(limits, workers, steps)
    for key, lim in limits.by_key.items():
        if lim.max_running is not None:
            assert run.max_running[key] <= lim.max_running, (key, lim)


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_work_no_limit_holds_back_never_waits_beside_an_idle_worker(data: tuple) -> None:  # type: ignore[type-arg]
    limits, workers, steps = data
    run = simulate(limits, workers, steps)
    assert run.delayed_unlimited == []


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_nothing_is_assigned_twice(data: tuple) -> None:  # type: ignore[type-arg]
    limits, workers, steps = data
    run = simulate(limits, workers, steps)
    ids = [c.id for _, c in run.starts]
    assert len(ids) == len(set(ids))


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.lists(st.sampled_from([-3600.0, -1.0, 0.0, 1.0, 3600.0]), min_size=1, max_size=5))
def test_a_clock_step_never_hands_out_more_than_one_full_bucket(data: tuple, jumps: list[float]) -> None:  # type: ignore[type-arg]
    """Whatever the steps of the clock (back or forward), the tokens a bucket holds never exceed
    its capacity, so a step forward lets at most ``1 + burst`` starts through at once."""
    limits, _, _ = data
    state = LimitState()
    t = 0.0
    for jump in jumps:
        t += jump
        now = T0 + timedelta(seconds=t)
        for key, lim in limits.by_key.items():
            if lim.rate is not None:
                bucket = state.bucket(key, lim.rate, now)
                assert bucket.tokens <= lim.rate.capacity
                state = with_buckets(state, {key: Bucket(0.0, bucket.at)})
