"""Periodic jobs with the real processes (issue 15, items 2 and 3).

- Three ``recruiter start`` processes, a worker and a cleaner; an every-second schedule
  for ``RUN_S`` seconds once it fired its first slot; the leader is SIGKILLed twice (a
  standby that has run since the start takes over each time). Every slot fired exactly once, except the slots
  a ``none`` catch-up skips after each failover, which are counted in the
  schedule's ``skipped``; no slot fired twice (read from ``archived`` plus
  ``scheduled``).
- ``overlap="skip"``: a job longer than its interval skips the slots while it runs;
  the skips are in the schedule document (``skipped``, ``last_skip``), and no
  occurrence was fired before the previous one had finished.
"""

from __future__ import annotations

import itertools
import json
import signal
import time
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from bson import ObjectId

from recruiter import Recruiter
from tests.conftest import long_or_short, wait_for
from tests.processes.conftest import Proc, Processes
from tests.workables import Record

# Every slot of RUN_S seconds is checked: 30 s in CI, 120 s in the long tier (RECRUITER_LONG_TESTS=1).
# The seconds are counted from the schedule's first fire, not from the processes' start: on a
# loaded machine a start of several seconds ate into the window, and a kill 10 s after the
# start could find the standby still starting (a failover longer than the lease's), so 30 s
# counted from the start missed more slots than the failover allows where 60 s passed.
RUN_S = long_or_short("RECRUITER_SCHEDULE_SECONDS", 30.0, 120.0)
TICK = timedelta(seconds=1)


def first_fire(db: Any, name: str) -> float:
    """The ``time.monotonic()`` at which ``name``'s first occurrence was archived: the
    processes have started, a recruiter leads and a worker runs its jobs."""
    wait_for(lambda: db.archived.find_one({"schedule.name": name}, {"_id": 1}), timeout_s=120, interval_s=0.1,
             message=f"{name}'s first occurrence archived")
    return time.monotonic()


def leader(processes: Processes, db: Any) -> Proc | None:
    lease = db.metadata.find_one({"_id": "recruiter"}) or {}
    owner = str(lease.get("owner", "")).split(":")
    return next((p for p in processes.started if p.name == "recruiter" and p.popen.poll() is None
                 and len(owner) > 1 and owner[1] == str(p.pid)), None)


def pause(db: Any, name: str) -> None:
    db.schedules.update_one({"_id": name}, {"$set": {"paused": True, "next_fire_at": None}})


def fired(db: Any, name: str) -> list[Any]:
    """Every occurrence's slot, from archived and scheduled (a slot fired twice shows twice)."""
    query = {"schedule.name": name}
    return [d["schedule"]["slot"] for coll in (db.archived, db.scheduled) for d in coll.find(query, {"schedule": 1})]


def test_every_slot_fires_once_across_two_leader_kills(processes: Processes, db_uri: str, db: Any) -> None:
    with Recruiter.connect(db_uri) as rec:
        rec.schedule("tick", every="1s", overlap="allow", catch_up="none", job=Record(db_uri, 1).as_job_of(rec))
    first_slot = db.schedules.find_one({"_id": "tick"})["next_slot"]
    for _ in range(3):  # a leader and two standbys, started before the window: each kill finds one running
        processes.recruiter()
    processes.worker("--concurrency", "2")
    processes.cleaner()
    started = first_fire(db, "tick")
    for kill_at in (RUN_S / 3, 2 * RUN_S / 3):
        wait_for(lambda at=kill_at: time.monotonic() - started >= at, timeout_s=RUN_S, interval_s=0.2)
        victim = wait_for(lambda: leader(processes, db), timeout_s=20)
        victim.signal(signal.SIGKILL)
        victim.wait(10)
    wait_for(lambda: time.monotonic() - started >= RUN_S, timeout_s=RUN_S, interval_s=0.2)
    pause(db, "tick")
    wait_for(lambda: db.scheduled.count_documents({"schedule.name": "tick"}) == 0, timeout_s=60)

    schedule = db.schedules.find_one({"_id": "tick"})
    slots = fired(db, "tick")
    twice = [s for s, n in Counter(slots).items() if n > 1]
    assert twice == [], f"slots fired twice: {twice}"
    expected = []
    slot = first_slot
    while slot < schedule["next_slot"]:
        expected.append(slot)
        slot += TICK
    missing = sorted(set(expected) - set(slots))
    assert set(slots) <= set(expected)
    assert len(expected) >= RUN_S - 5
    assert len(missing) == schedule["skipped"], (missing, schedule)
    assert schedule["skipped"] == 0 or schedule["last_skip"]["reason"] == "catch-up"
    # Only the failover windows (about a lease's ttl each) skip slots, not steady running.
    assert len(missing) <= 2 * 8, missing
    assert db.archived.count_documents({"schedule.name": "tick", "why": "done"}) == len(slots)
    late = sorted((d["created_at"] - d["schedule"]["slot"]).total_seconds()
                  for d in db.archived.find({"schedule.name": "tick"}))
    print(f"slots={len(expected)} fired={len(slots)} skipped={len(missing)} "
          f"fired late by: median {late[len(late) // 2]:.3f}s, max {late[-1]:.3f}s")


def test_overlap_skip_skips_slots_while_the_previous_runs(processes: Processes, db_uri: str, db: Any) -> None:
    with Recruiter.connect(db_uri) as rec:
        rec.schedule("slow", every="1s", job=Record(db_uri, 1, sleep_s=2.5).as_job_of(rec))  # overlap="skip"
    processes.recruiter()
    processes.worker("--concurrency", "3")
    processes.cleaner()
    wait_for(lambda: db.archived.count_documents({"schedule.name": "slow"}) >= 2, timeout_s=60)
    pause(db, "slow")
    wait_for(lambda: db.scheduled.count_documents({"schedule.name": "slow"}) == 0, timeout_s=30)

    schedule = db.schedules.find_one({"_id": "slow"})
    assert schedule["skipped"] >= 2
    assert schedule["last_skip"]["reason"] == "overlap"
    jobs = list(db.archived.find({"schedule.name": "slow"}).sort("schedule.slot", 1))
    assert len({j["schedule"]["slot"] for j in jobs}) == len(jobs)
    for previous, nxt in itertools.pairwise(jobs):
        # Never fired while the previous ran: its outcome was recorded (its run ended) first.
        assert nxt["created_at"] >= previous["last_execution"]["ended_at"]


def overlap_skips(processes: Processes) -> list[dict[str, Any]]:
    """The recruiters' ``schedule.skipped`` events for overlap."""
    out = []
    for p in processes.started:
        if p.name != "recruiter":
            continue
        for line in p.log().splitlines():
            if '"schedule.skipped"' in line:
                event = json.loads(line)
                if event.get("reason") == "overlap":
                    out.append(event)
    return out


def ended_runs_counted_as_overlaps(db: Any, processes: Processes) -> list[str]:
    """The overlap skips whose job in the way had ended its run before the skip was logged (by
    more than 0.1 s: the processes' clocks are estimates of the server's). On a loaded machine a
    job may still wait for its worker, or run, when the next slot comes: that skip is right."""
    wrong = []
    for event in overlap_skips(processes):
        logged = datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00"))
        job = db.archived.find_one({"_id": ObjectId(event["waiting_on"])}) or {}
        ended = (job.get("last_execution") or {}).get("ended_at")
        if ended is not None and ended < logged - timedelta(milliseconds=100):
            wrong.append(f"slot {event['slot']}: {event['waiting_on']} ended at {ended}, skip logged at {logged}")
    return wrong


def test_a_short_job_every_second_fires_every_slot(processes: Processes, db_uri: str, db: Any) -> None:
    """Issue 22, item 1: an every-second schedule (overlap="skip", the default) of a 5 ms job
    fires every slot; a run that ended is never counted as an overlap (it used to fire
    every other second: the previous job's outcome was still waiting in the roster)."""
    with Recruiter.connect(db_uri) as rec:
        rec.schedule("quick", every="1s", job=Record(db_uri, 1, sleep_s=0.005).as_job_of(rec))
    first_slot = db.schedules.find_one({"_id": "quick"})["next_slot"]
    processes.recruiter()
    processes.worker()
    started = first_fire(db, "quick")
    wait_for(lambda: time.monotonic() - started >= RUN_S, timeout_s=RUN_S + 5, interval_s=0.5)
    pause(db, "quick")
    wait_for(lambda: db.scheduled.count_documents({"schedule.name": "quick"}) == 0, timeout_s=60)

    schedule = db.schedules.find_one({"_id": "quick"})
    slots = fired(db, "quick")
    assert len(slots) == len(set(slots))
    assert ended_runs_counted_as_overlaps(db, processes) == []
    # Every slot fired, but for a round late by over a second on a loaded machine (the
    # ``none`` catch-up then fires the latest slot and counts the other: never silently), or a
    # job still waiting or running when the next slot came (an overlap, checked just above).
    expected = int((schedule["next_slot"] - first_slot) / TICK)
    assert expected - len(slots) == schedule.get("skipped", 0)
    assert len(slots) >= RUN_S - 3, f"{len(slots)} fires in {RUN_S:.0f} s"


def test_a_short_job_every_second_across_a_leader_kill(processes: Processes, db_uri: str, db: Any) -> None:
    """Across a SIGKILLed leader only the slots the ``none`` catch-up policy documents are
    missed (those that passed while no recruiter led, counted as ``catch-up``); none is
    counted as an overlap, and none fires twice."""
    with Recruiter.connect(db_uri) as rec:
        rec.schedule("quick", every="1s", catch_up="none", job=Record(db_uri, 1, sleep_s=0.005).as_job_of(rec))
    first_slot = db.schedules.find_one({"_id": "quick"})["next_slot"]
    processes.recruiter()
    processes.recruiter()
    processes.worker()
    started = first_fire(db, "quick")
    wait_for(lambda: time.monotonic() - started >= RUN_S / 2, timeout_s=RUN_S, interval_s=0.5)
    victim = wait_for(lambda: leader(processes, db), timeout_s=20)
    victim.signal(signal.SIGKILL)
    victim.wait(10)
    wait_for(lambda: time.monotonic() - started >= RUN_S, timeout_s=RUN_S, interval_s=0.5)
    pause(db, "quick")
    wait_for(lambda: db.scheduled.count_documents({"schedule.name": "quick"}) == 0, timeout_s=60)

    schedule = db.schedules.find_one({"_id": "quick"})
    slots = fired(db, "quick")
    assert len(slots) == len(set(slots))
    # The occurrence fired just before the kill waits for the next leader to be assigned: it
    # has not run, so the first slot after the failover may be skipped as an overlap.
    assert sum(event["slots"] for event in overlap_skips(processes)) <= 2
    assert ended_runs_counted_as_overlaps(db, processes) == []
    expected = int((schedule["next_slot"] - first_slot) / TICK)
    missed = expected - len(slots)
    assert missed == schedule.get("skipped", 0)  # every missed slot is counted
    # The lease's ttl (2 s) plus a standby's take-over: a few slots, not every other one.
    assert missed <= 8, missed
