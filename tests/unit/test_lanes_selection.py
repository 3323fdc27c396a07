"""Look-ahead lanes and the selection: properties of :mod:`recruiter.domain.lanes` and of the
depth-first choice of lane in :mod:`recruiter.domain.selection`.

The fairness bound, as these tests state and check it. A round's free workers are
lanes; a lane's depth is how many jobs its runner (the slot) holds before it.

1. **Shallower lanes are served as if the deeper ones did not exist.** For every
   depth d, the assignments a round makes to lanes of depth <= d are exactly the
   selection over those lanes alone (same jobs, same lanes, same order). A turn's
   job goes to the shallowest free lane that takes its group, and a group that
   has no free lane of depth <= d never gets one back within the round, so the
   deeper lanes only take what the shallower ones leave. With d = 0: the idle
   slots get exactly the jobs ``--prefetch 0`` would give them, and a job goes
   ahead (depth > 0) only when no free lane of smaller depth that takes its group
   is left free in the round.
2. **Within a group, the order is the policy's.** The tenants' ring, the counting
   scheme of priorities, retrying jobs first and FIFO are per group; look-ahead
   only adds turns, and a group's jobs are served in the same order whatever
   lanes take them. What look-ahead CAN change is how many jobs a group gets in a
   round when lanes take different groups: a deeper lane that takes only ``a``
   lets ``a`` be served again where ``--prefetch 0`` would have stopped, and the
   cursor it leaves says so. It cannot change who is served first: the turns go
   round the same ring. When every free lane takes the same groups, the served
   jobs and the cursor are exactly those of the selection with all depths 0, so
   the long-run shares (tenants within one of equal, groups within one, the
   high/low scheme) of :mod:`tests.unit.test_selection` hold unchanged.
3. **All depths 0 (``--prefetch 0``) is today's selection**, and so is any round
   where every lane has the same depth.
4. **Waiting bound.** A runner's lanes take the same groups, so the lanes of one
   runner that a round fills are the shallowest ones: their depths are
   held, held+1, ... (held = jobs the runner already holds). A job taken at
   depth d therefore has exactly d jobs of its runner before it, and d <= N with
   ``--prefetch N`` (N + 1 lanes). That it then waits for at most those d jobs
   (each bounded by its own timeout, if any) is the worker's part: it runs its
   lanes' jobs in the order they came (tests/processes/test_prefetch.py).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recruiter.domain.lanes import (
    MAX_PREFETCH,
    depths,
    held_ahead,
    is_ahead,
    lane_ids,
    lane_of,
    lanes_of,
    needs_mark,
    runner_of,
)
from recruiter.domain.placement import is_worker_group, worker_group
from recruiter.domain.selection import ANY_GROUP, Candidate, CountingScheme, Cursor, FreeWorker, select
from tests.unit.test_candidates import FakeCollection
from tests.unit.test_selection import GROUPS, NOW, TENANTS, check_selection, long_run, scenarios, workers_of

RESERVED = [worker_group("r1"), worker_group("r2")]
DEPTHS = st.integers(0, 4)

Scenario = tuple[list[FreeWorker], list[Candidate], Cursor, CountingScheme]


@st.composite
def lane_scenarios(draw: Any) -> Scenario:
    """The selection's scenarios, with a random depth per lane, reserved ``@worker:`` groups
    named by some lanes, jobs aimed at those workers, and cursors that may stand on them."""
    workers, jobs, cursor, scheme = draw(scenarios())
    lanes = [FreeWorker(w.id, (*w.groups, *draw(st.lists(st.sampled_from(RESERVED), max_size=1))), draw(DEPTHS))
             for w in workers]
    aimed = [Candidate(f"r{i:02d}", draw(st.sampled_from(RESERVED)), NOW - timedelta(seconds=draw(st.integers(0, 5))),
                       draw(st.sampled_from(TENANTS)), draw(st.sampled_from(["high", "low"])), draw(st.booleans()))
             for i in range(draw(st.integers(0, 6)))]
    last_group = draw(st.none() | st.sampled_from([*GROUPS, *RESERVED]))
    return lanes, jobs + aimed, replace(cursor, last_group=last_group), scheme


def depth_of(lanes: list[FreeWorker]) -> dict[str, int]:
    return {w.id: w.depth for w in lanes}


# -- the selection with look-ahead ---------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(lane_scenarios())
def test_every_selection_property_holds_with_random_depths(data: Scenario) -> None:
    """No job twice, no lane two jobs, groups (``*`` never takes a reserved group), no lane idle
    while a job of its groups waits, retrying first, FIFO."""
    lanes, jobs, cursor, scheme = data
    selection = select(lanes, jobs, cursor, NOW, scheme)
    check_selection(lanes, jobs, selection)
    by_lane = {w.id: w for w in lanes}
    groups = {c.id: c.group for c in jobs}
    for a in selection.assignments:
        if is_worker_group(groups[a.job_id]):
            assert groups[a.job_id] in by_lane[a.worker_id].groups, "a job aimed at a worker went elsewhere"


@settings(max_examples=150, deadline=None)
@given(lane_scenarios())
def test_planned_reads_give_the_same_round_with_depths(data: Scenario) -> None:
    lanes, jobs, cursor, scheme = data
    assert FakeCollection(jobs).plan(lanes, cursor, scheme) == select(lanes, jobs, cursor, NOW, scheme)


@settings(max_examples=200, deadline=None)
@given(lane_scenarios(), st.randoms(use_true_random=False))
def test_the_order_of_lanes_and_candidates_does_not_matter_beyond_ties(data: Scenario, rnd: Any) -> None:
    lanes, jobs, cursor, scheme = data
    shuffled = list(jobs)
    rnd.shuffle(shuffled)
    assert select(lanes, shuffled, cursor, NOW, scheme) == select(lanes, jobs, cursor, NOW, scheme)


@settings(max_examples=200, deadline=None)
@given(lane_scenarios())
def test_a_job_goes_ahead_only_when_no_shallower_lane_of_its_group_is_left_free(data: Scenario) -> None:
    lanes, jobs, cursor, scheme = data
    selection = select(lanes, jobs, cursor, NOW, scheme)
    groups = {c.id: c.group for c in jobs}
    depth = depth_of(lanes)
    left_free = [w for w in lanes if w.id not in {a.worker_id for a in selection.assignments}]
    for a in selection.assignments:
        shallower = [w.id for w in left_free if w.depth < depth[a.worker_id] and w.takes(groups[a.job_id])]
        assert not shallower, f"{a.job_id} went to depth {depth[a.worker_id]} while {shallower} stayed free"


@settings(max_examples=200, deadline=None)
@given(lane_scenarios())
def test_shallower_lanes_are_served_as_if_the_deeper_did_not_exist(data: Scenario) -> None:
    lanes, jobs, cursor, scheme = data
    selection = select(lanes, jobs, cursor, NOW, scheme)
    depth = depth_of(lanes)
    for d in sorted(set(depth.values())):
        shallow = [w for w in lanes if w.depth <= d]
        alone = select(shallow, jobs, cursor, NOW, scheme).assignments
        assert [a for a in selection.assignments if depth[a.worker_id] <= d] == alone, f"depth <= {d}"


@dataclass(frozen=True)
class TodaysWorker(FreeWorker):
    """A free worker as the selection saw it before look-ahead: no depth in its sort key."""

    @property
    def specificity(self) -> tuple[bool, int]:  # type: ignore[override]
        return self.takes_any, len(self.groups)


@settings(max_examples=150, deadline=None)
@given(lane_scenarios(), DEPTHS)
def test_one_depth_for_every_lane_is_todays_selection(data: Scenario, same: int) -> None:
    lanes, jobs, cursor, scheme = data
    today = select([TodaysWorker(w.id, w.groups) for w in lanes], jobs, cursor, NOW, scheme)
    assert select([replace(w, depth=0) for w in lanes], jobs, cursor, NOW, scheme) == today
    assert select([replace(w, depth=same) for w in lanes], jobs, cursor, NOW, scheme) == today


@settings(max_examples=150, deadline=None)
@given(lane_scenarios())
def test_lanes_of_the_same_groups_serve_the_same_jobs_as_without_depths(data: Scenario) -> None:
    lanes, jobs, cursor, scheme = data
    same = [replace(w, groups=(ANY_GROUP, *RESERVED[:1])) for w in lanes]
    deep = select(same, jobs, cursor, NOW, scheme)
    flat = select([replace(w, depth=0) for w in same], jobs, cursor, NOW, scheme)
    assert [a.job_id for a in deep.assignments] == [a.job_id for a in flat.assignments]
    assert deep.cursor == flat.cursor


def test_a_deeper_lane_of_another_group_may_change_how_many_jobs_a_group_gets() -> None:
    """What look-ahead can change (the module's point 2): with lane ``x~1`` ahead, ``a`` is
    served twice where the idle slot ``y`` alone serves it once; ``b`` is not served earlier."""
    jobs = [Candidate("a1", "a", NOW), Candidate("a2", "a", NOW), Candidate("b1", "b", NOW)]
    lanes = [FreeWorker("x~1", ("a",), depth=1), FreeWorker("y", ("a", "b"))]
    with_lanes = select(lanes, jobs, Cursor(), NOW)
    assert [(a.worker_id, a.job_id) for a in with_lanes.assignments] == [("y", "a1"), ("x~1", "a2")]
    assert [(a.worker_id, a.job_id) for a in select(lanes[1:], jobs, Cursor(), NOW).assignments] == [("y", "a1")]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(DEPTHS, min_size=1, max_size=8), min_size=1, max_size=30), st.randoms(use_true_random=False))
def test_long_run_shares_are_those_without_depths(rounds: list[list[int]], rnd: Any) -> None:
    """Tenants, priorities and FIFO over rounds in a row, the cursor carried over: every round's
    lanes take the same group, so the jobs are served in exactly the order of depth 0."""
    tenants = ["", "t1", "t2"]
    total = sum(len(r) for r in rounds)
    jobs = [Candidate(f"{t}-{i}", "a", NOW - timedelta(seconds=rnd.randint(1, 10_000)), t,
                      rnd.choice(["high", "low"]), rnd.random() < 0.1) for t in tenants for i in range(total + 1)]
    deep = long_run([[replace(w, depth=d) for w, d in zip(workers_of(len(r), "a"), r, strict=True)]
                     for r in rounds], jobs)
    assert deep == long_run([workers_of(len(r), "a") for r in rounds], jobs)
    shares = Counter(c.tenant for c in deep)
    assert max(shares.values()) - min(shares.get(t, 0) for t in tenants) <= 1, shares


# -- depths from the roster, and the waiting bound --------------------------------------------------

Entry = dict[str, Any]


@st.composite
def rosters(draw: Any) -> tuple[list[Entry], list[Entry], list[Entry], dict[str, tuple[str, ...]]]:
    """Runners with N + 1 lanes each (some older workers without lanes): every lane is held
    (runs or waits to run a job), holds an outcome (unheld, not free) or is free.
    Returns (entries, unheld, free in roster order, groups per runner)."""
    entries: list[Entry] = []
    unheld: list[Entry] = []
    free: list[Entry] = []
    groups: dict[str, tuple[str, ...]] = {}
    for r in range(draw(st.integers(1, 5))):
        slot = f"w{r}"
        prefetch = draw(st.none() | st.integers(0, 3))  # None: a worker from before look-ahead
        groups[slot] = tuple(draw(st.lists(st.sampled_from([*GROUPS, ANY_GROUP]), min_size=1, max_size=2,
                                           unique=True)))
        ids = lane_ids(slot, prefetch or 0)
        for k, lane in enumerate(ids):
            entry: Entry = {"_id": lane}
            if prefetch is not None:
                entry.update(runner=slot, lane=k, lanes=len(ids))
            state = draw(st.sampled_from(["held", "outcome", "free"]))
            entries.append(entry)
            if state != "held":
                unheld.append(entry)
            if state == "free":
                free.append(entry)
    return entries, unheld, draw(st.permutations(free)), groups


@settings(max_examples=200, deadline=None)
@given(rosters())
def test_a_runners_free_lanes_get_the_depths_after_what_it_holds(roster: Any) -> None:
    entries, unheld, free, _ = roster
    got = depths(free, unheld)
    assert set(got) == {e["_id"] for e in free}
    for runner in {runner_of(e) for e in entries}:
        mine = [e for e in entries if runner_of(e) == runner]
        held = len(mine) - sum(1 for e in unheld if runner_of(e) == runner)
        in_order = [got[e["_id"]] for e in sorted((e for e in free if runner_of(e) == runner), key=lane_of)]
        assert in_order == list(range(held, held + len(in_order))), "distinct depths held..held+k-1, in lane order"
        assert all(d <= lanes_of(mine[0]) - 1 for d in in_order), "never deeper than --prefetch"
        if held == 0 and in_order:
            assert in_order[0] == 0, "an idle runner's first free lane has depth 0"


@settings(max_examples=200, deadline=None)
@given(rosters(), lane_scenarios())
def test_a_job_taken_at_depth_d_has_d_jobs_of_its_runner_before_it(roster: Any, data: Scenario) -> None:
    entries, unheld, free, groups = roster
    _, jobs, cursor, scheme = data
    got = depths(free, unheld)
    lanes = [FreeWorker(e["_id"], groups[str(runner_of(e))], got[e["_id"]]) for e in free]
    selection = select(lanes, jobs, cursor, NOW, scheme)
    check_selection(lanes, jobs, selection)
    by_id = {e["_id"]: e for e in entries}
    taken: dict[object, list[int]] = defaultdict(list)
    for a in selection.assignments:
        taken[runner_of(by_id[a.worker_id])].append(got[a.worker_id])
    for runner, ds in taken.items():
        held = sum(1 for e in entries if runner_of(e) == runner) - sum(1 for e in unheld if runner_of(e) == runner)
        # Before the job at depth d: the `held` jobs, then this round's jobs at depths held..d-1.
        assert sorted(ds) == list(range(held, held + len(ds))), f"{runner}: lanes filled out of depth order {ds}"
        assert max(ds) <= MAX_PREFETCH


def test_lane_ids() -> None:
    assert lane_ids("W", 0) == ["W"]
    assert lane_ids("W", 1) == ["W", "W~1"]
    assert lane_ids("W-0", 2) == ["W-0", "W-0~1", "W-0~2"]


def test_depths_of_an_idle_a_busy_and_an_older_worker() -> None:
    idle: list[Entry] = [{"_id": i, "runner": "i", "lane": k, "lanes": 3} for k, i in enumerate(lane_ids("i", 2))]
    busy: list[Entry] = [{"_id": i, "runner": "b", "lane": k, "lanes": 3} for k, i in enumerate(lane_ids("b", 2))]
    old: Entry = {"_id": "old"}  # no runner, no lanes: its own runner with one lane
    free = [*idle, busy[2], old]
    # busy[1] holds an outcome (unheld, not free): b holds one job, busy[0]'s.
    assert depths(free, [*free, busy[1]]) == {"i": 0, "i~1": 1, "i~2": 2, "b~2": 1, "old": 0}
    assert depths([busy[2]], [busy[2]]) == {"b~2": 2}, "b holds two jobs"


@pytest.mark.parametrize(("runner", "lanes"), [(5, None), ("", None), (None, "2"), ("r", True), ("r", 0),
                                           ("r", MAX_PREFETCH + 2), ("r", -1), ("r", 2.0)])
def test_malformed_runner_or_lanes_count_as_an_older_worker(runner: Any, lanes: Any) -> None:
    entry = {"_id": "e", "runner": runner, "lanes": lanes}
    if runner == "r":  # a valid runner: the malformed lanes count as one lane
        assert lanes_of(entry) == 1
    else:
        assert runner_of(entry) == "e"
    assert depths([entry], [entry]) == {"e": 0}


def test_lanes_missing_from_the_round_count_as_held() -> None:
    """A runner's lanes the round did not see (not registered yet, or removed) count as holding
    a job: its free lane goes ahead, the safe side (the job starts only after ``started``)."""
    lane = {"_id": "w~1", "runner": "w", "lanes": 2}
    assert depths([lane], [lane]) == {"w~1": 1}
    own = {"_id": "e", "runner": 5, "lanes": 2}  # a malformed runner: its own runner, of 2 lanes
    assert depths([own], [own]) == {"e": 1}


def test_a_free_lane_not_listed_unheld_still_gets_a_depth_below_its_lanes() -> None:
    lane = {"_id": "w~1", "runner": "w", "lanes": 2}
    assert depths([lane], []) == {"w~1": 1}


# -- held_ahead: an ahead job provably never started ---------------------------------------------------

JOB = {"_id": "j", "lock_token": "t1"}


def ahead_entry(**fields: Any) -> dict[str, Any]:
    """The entry of lane ``w~1`` holding JOB, handed out ahead: ``ahead`` names its lock token."""
    return {"_id": "w~1", "ahead": "t1", "assigned_to": {"w~1": "j"}, **fields}


def test_held_ahead_when_the_entry_holds_it_ahead_and_never_started_it() -> None:
    assert held_ahead(JOB, ahead_entry())
    assert held_ahead(JOB, ahead_entry(started="t0")), "started for an earlier job of the lane"
    assert needs_mark(ahead_entry(), JOB)


@pytest.mark.parametrize(("job", "entry", "why"), [
    (JOB, None, "no entry"),
    (JOB, ahead_entry(ahead=False), "not ahead"),
    (JOB, {k: v for k, v in ahead_entry().items() if k != "ahead"}, "no ahead field"),
    (JOB, ahead_entry(ahead=True), "ahead names no token"),
    (JOB, ahead_entry(ahead="t0"), "ahead for an earlier job of the lane"),
    (JOB, ahead_entry(assigned_to=None), "no assignment"),
    (JOB, ahead_entry(assigned_to=["j"]), "assignment not a map"),
    (JOB, ahead_entry(assigned_to={"w~1": "other"}), "holds another job"),
    (JOB, ahead_entry(assigned_to={"w": "j"}), "another lane's key"),
    ({"_id": "j"}, ahead_entry(), "the job has no lock token"),
    ({"_id": "j", "lock_token": None}, ahead_entry(ahead=None), "no token on either side"),
    (JOB, ahead_entry(started="t1"), "started with this job's token"),
])
def test_not_held_ahead(job: dict[str, Any], entry: dict[str, Any] | None, why: str) -> None:
    assert not held_ahead(job, entry), why


@pytest.mark.parametrize(("entry", "job", "needed"), [
    (ahead_entry(), JOB, True),
    (ahead_entry(started="t1"), JOB, False),
    (ahead_entry(started="t0"), JOB, True),
    (ahead_entry(ahead=False), JOB, False),
    (ahead_entry(ahead="t0"), JOB, False),
    (ahead_entry(), "j", False),  # a reference, not a copy: no token to compare
    (ahead_entry(), {"_id": "j"}, False),
])
def test_a_worker_marks_only_an_ahead_job_not_marked_yet(entry: dict[str, Any], job: Any, needed: bool) -> None:
    assert needs_mark(entry, job) is needed
    assert is_ahead(entry.get("ahead"), job if isinstance(job, dict) else None) is (entry.get("ahead") == "t1"
                                                                                    and job == JOB)
