"""``recruiter stats`` at scale (issue 24, "What it must show 1"): 100 000 queued and 200 000 archived
jobs over 50 tenants, seeded directly as the store writes them. Every figure ``Admin.stats()``
returns equals a brute-force count the test makes in Python over the same documents, and the
read's round trips and documents returned are bounded and printed.

The sizes come from ``RECRUITER_STATS_SCALE_QUEUED`` / ``..._ARCHIVED`` (defaults: the issue's).
The seeding dominates the test's time: measured on the embedded server, see the print.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import ObjectId
from click.testing import CliRunner
from pymongo import MongoClient

from bench.commands import Commands
from recruiter.admin import Admin, Stats
from recruiter.admin.stats import SAMPLE_LIMIT, WINDOWS_S
from recruiter.cli.main import main
from recruiter.domain.clock import ManualClock
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.store import ensure_indexes_sync
from tests.workables import Record

QUEUED = int(os.environ.get("RECRUITER_STATS_SCALE_QUEUED", "100000"))
ARCHIVED = int(os.environ.get("RECRUITER_STATS_SCALE_ARCHIVED", "200000"))
TENANTS = tuple(f"tenant-{i:02d}" for i in range(50))
GROUPS = ("billing", "mail", "reports", "exports", "images")
PAUSED_GROUPS = ["exports"]
PAUSED_TENANTS = ["tenant-07", "tenant-33"]
WORKERS = 60  # roster entries: some holding a job (running or assigned), idle ones, zombies, a stopping one
BATCH = 10_000
WHYS = ("done",) * 17 + ("tried-too-many-times", "cancelled", "crashed-too-many-times")
Key = tuple[str, str]


def ms(t: datetime) -> datetime:
    """A time as BSON keeps it (milliseconds)."""
    return t.replace(microsecond=t.microsecond // 1000 * 1000)


@dataclass
class Seeded:
    now: datetime
    scheduled: list[dict[str, Any]] = field(default_factory=list)
    archived: list[dict[str, Any]] = field(default_factory=list)
    beats: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0


def waiting_jobs(template: dict[str, Any], now: datetime, rnd: random.Random) -> Iterable[dict[str, Any]]:
    """Ready (due up to 2 h ago), delayed (due in 10 min to 2 h), retrying (due or not): never due
    within a minute of ``now``, so the server's clock (the CLI's run) sees the same depth."""
    for i in range(QUEUED):
        kind = rnd.random()
        ahead = timedelta(seconds=rnd.uniform(600, 7200))
        ago = timedelta(seconds=rnd.uniform(60, 7200))
        retrying = kind >= 0.85
        due = now + ahead if 0.6 <= kind < 0.75 or kind >= 0.92 else now - ago
        doc = {**template, "_id": ObjectId(), "group": rnd.choice(GROUPS), "priority": rnd.choice(("high", "low")),
               "scheduled_at": ms(due), "created_at": ms(min(due, now) - timedelta(seconds=5)),
               "status": "retrying" if retrying else "queued", "attempts": rnd.randint(1, 3) if retrying else 0}
        if i % 40:  # one job in 40 has no tenant
            doc["tenant"] = rnd.choice(TENANTS)
        yield doc


def archived_jobs(template: dict[str, Any], now: datetime, rnd: random.Random) -> Iterable[dict[str, Any]]:
    """Archived over the last hour (2 % of them over the hour before), each at its own millisecond,
    so the newest N of a window are one set whatever the sort's ties."""
    spread = rnd.sample(range(1, 3_600_000), ARCHIVED)
    for i, at_ms in enumerate(spread):
        at = now - timedelta(milliseconds=at_ms + (3_600_000 if i % 50 == 0 else 0))
        due = ms(at - timedelta(seconds=rnd.uniform(0.5, 120)))
        why = rnd.choice(WHYS)
        doc = {k: v for k, v in template.items() if k != "status"}
        started = ms(due + (at - due) * rnd.uniform(0.1, 0.9))
        execution: dict[str, Any] = {"attempt": 1, "scheduled_at": due, "worker": "w1", "pid": 1, "hostname": "vm"}
        if why != "cancelled" or i % 2:  # a job cancelled before it started has no start nor end
            execution.update(started_at=started, ended_at=at, outcome="done" if why == "done" else "failed")
        doc.update(_id=ObjectId(), group=rnd.choice(GROUPS), tenant=rnd.choice(TENANTS), why=why, done=why == "done",
                   archived_at=at, attempts=1, scheduled_at=due, last_execution=execution, executions=[execution])
        yield doc


def workers(db: Any, seeded: Seeded, template: dict[str, Any], rnd: random.Random) -> None:
    """Roster entries and heartbeats; the first 30 hold a job (locked), half of those run it."""
    now = seeded.now
    entries, beats, locked = [], [], []
    for i in range(WORKERS):
        wid, session = f"w{i:02d}", ObjectId()
        groups = [GROUPS[i % len(GROUPS)]]
        zombie = i % 10 == 9
        entry = {"_id": wid, "work_on": groups, "available": i >= 30, "session": session, "created_at": now,
                 "last_seen_at": now, "pid": 1000 + i, "hostname": "vm"}
        if i == 45:
            entry["stop_requested"] = True
        beat: dict[str, Any] = {"_id": wid, "session": session, "last_seen_at": now - timedelta(seconds=1),
                                "fresh_until": now + timedelta(seconds=-20 if zombie else 30),
                                "heartbeat_interval_s": 5.0, "working": False}
        if i < 30:
            token = ObjectId()
            job = {**template, "_id": ObjectId(), "group": groups[0], "tenant": rnd.choice(TENANTS),
                   "status": "assigned", "locked": True, "locked_by": wid, "lock_token": token, "locked_at": now,
                   "attempts": 1, "scheduled_at": ms(now - timedelta(seconds=rnd.uniform(60, 600)))}
            locked.append(job)
            entry["assigned_to"] = {wid: job["_id"]}
            if i % 2 == 0:
                beat.update(working=True, working_on=job["_id"], working_token=token, working_since=now)
        entries.append(entry)
        beats.append(beat)
        seeded.beats[wid] = beat
    db.roster.insert_many(entries)
    db.heartbeats.insert_many(beats)
    db.scheduled.insert_many(locked)
    seeded.scheduled.extend(locked)


def seed(db: Any, db_uri: str) -> Seeded:
    rnd = random.Random(24)
    ensure_indexes_sync(db)
    now = ms(datetime.now(UTC))
    seeded = Seeded(now)
    template = dict(build_job_document(Record(db_uri, n=0), JobOptions(), now))
    template.pop("tenant", None)
    began = time.perf_counter()
    for source, collection, kept in ((waiting_jobs(template, now, rnd), db.scheduled, seeded.scheduled),
                                     (archived_jobs(template, now, rnd), db.archived, seeded.archived)):
        batch: list[dict[str, Any]] = []
        for doc in source:
            batch.append(doc)
            if len(batch) == BATCH:
                collection.insert_many(batch, ordered=False)
                kept.extend(batch)
                batch = []
        if batch:
            collection.insert_many(batch, ordered=False)
            kept.extend(batch)
    workers(db, seeded, template, rnd)
    db.metadata.insert_one({"_id": "paused", "groups": PAUSED_GROUPS, "tenants": PAUSED_TENANTS})
    seeded.seconds = time.perf_counter() - began
    return seeded


def nearest_rank(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def key_of(doc: dict[str, Any]) -> Key:
    return doc["group"], doc.get("tenant") or ""


def brute_depth(seeded: Seeded) -> dict[Key, dict[str, Any]]:
    figures: dict[Key, dict[str, Any]] = defaultdict(lambda: defaultdict(int))
    oldest: dict[Key, datetime] = {}
    for d in seeded.scheduled:
        key, f = key_of(d), figures[key_of(d)]
        if d["locked"]:
            beat = seeded.beats.get(d["locked_by"], {})
            f["running" if beat.get("working_token") == d["lock_token"] else "assigned"] += 1
        elif d["scheduled_at"] <= seeded.now:
            f["ready"] += 1
            f["paused"] += d["group"] in PAUSED_GROUPS or d.get("tenant") in PAUSED_TENANTS
            oldest[key] = min(oldest.get(key, d["scheduled_at"]), d["scheduled_at"])
        else:
            f["retrying" if d["status"] == "retrying" else "delayed"] += 1
    for key, at in oldest.items():
        figures[key]["oldest_ready_s"] = (seeded.now - at).total_seconds()
    return figures


def brute_windows(seeded: Seeded) -> dict[int, dict[str, Any]]:
    """Per window: archived and failed per key (exact), and the wait and run times of the jobs
    the window's percentiles are defined over: every job, or the newest SAMPLE_LIMIT of each slice
    (1 min, 1-5 min, 5 min-1 h) when a slice holds more (then ``sampled``)."""
    now = seeded.now
    until = now + timedelta(milliseconds=1)
    slices = []
    for s in WINDOWS_S:
        since = now - timedelta(seconds=s)
        part = sorted((d for d in seeded.archived if since <= d["archived_at"] < until),
                      key=lambda d: d["archived_at"], reverse=True)
        slices.append((part, part[:SAMPLE_LIMIT], len(part) > SAMPLE_LIMIT))
        until = since
    out: dict[int, dict[str, Any]] = {}
    for i, s in enumerate(WINDOWS_S):
        counts: dict[Key, dict[str, Any]] = defaultdict(lambda: defaultdict(list))
        for part, sample, _ in slices[: i + 1]:
            for d in part:
                c = counts[key_of(d)]
                c.setdefault("archived", 0)
                c.setdefault("failed", 0)
                c["archived"] += 1
                c["failed"] += d["why"] != "done"
            for d in sample:
                last = d["last_execution"]
                if "started_at" in last:
                    counts[key_of(d)]["waits"].append((last["started_at"] - last["scheduled_at"]).total_seconds())
                    counts[key_of(d)]["runs"].append((last["ended_at"] - last["started_at"]).total_seconds())
        out[s] = {"keys": counts, "sampled": any(sampled for _, _, sampled in slices[: i + 1])}
    return out


def check_depth(result: Stats, expected: dict[Key, dict[str, Any]]) -> int:
    figures = 0
    seen = set()
    for g in result.groups:
        for t in g.tenants:
            key = (g.group, t.tenant)
            seen.add(key)
            e, d = expected.get(key, {}), t.depth
            got = (d.ready, d.paused, d.delayed, d.retrying, d.assigned, d.running)
            assert got == tuple(e.get(k, 0) for k in ("ready", "paused", "delayed", "retrying", "assigned",
                                                       "running")), key
            assert d.oldest_ready_s == pytest.approx(e["oldest_ready_s"], abs=1e-3) if d.ready else \
                d.oldest_ready_s is None, key
            figures += 7
        for name in ("ready", "paused", "delayed", "retrying", "assigned", "running"):
            assert getattr(g.depth, name) == sum(expected.get((g.group, t.tenant), {}).get(name, 0)
                                                 for t in g.tenants), (g.group, name)
    assert {k for k in expected if any(expected[k].get(n) for n in ("ready", "delayed", "retrying", "assigned",
                                                                      "running"))} <= seen
    return figures


def check_windows(result: Stats, expected: dict[int, dict[str, Any]]) -> int:
    figures = 0
    listed = {(g.group, t.tenant) for g in result.groups for t in g.tenants}
    assert set(expected[WINDOWS_S[-1]]["keys"]) <= listed
    for g in result.groups:
        for t in g.tenants:
            for w in t.windows:
                e = expected[w.seconds]["keys"].get((g.group, t.tenant), {})
                assert (w.archived, w.failed) == (e.get("archived", 0), e.get("failed", 0)), (g.group, t.tenant)
                assert w.sampled == expected[w.seconds]["sampled"]
                for name, values in (("wait", e.get("waits", [])), ("run", e.get("runs", []))):
                    for p in (50, 95):
                        want = nearest_rank(values, p)
                        got = getattr(w, f"{name}_p{p}_s")
                        assert got == pytest.approx(want, abs=1e-3) if want is not None else got is None, \
                            (g.group, t.tenant, w.seconds, name, p)
                figures += 6
        for i, w in enumerate(g.windows):
            assert w.archived == sum(t.windows[i].archived for t in g.tenants)
            assert w.failed == sum(t.windows[i].failed for t in g.tenants)
            figures += 2
    return figures


def check_workers(result: Stats, seeded: Seeded) -> None:
    # w00..w29 hold a job (busy), w30..w59 idle; every tenth (w09, w19...) is a zombie; w45 stopping.
    zombies = {f"w{i:02d}" for i in range(WORKERS) if i % 10 == 9}
    stopping = {"w45"} - zombies
    busy = {f"w{i:02d}" for i in range(30)} - zombies
    idle = {f"w{i:02d}" for i in range(30, WORKERS)} - zombies - stopping
    w = result.workers
    assert (w.idle, w.busy, w.stopping, w.zombies) == (len(idle), len(busy), len(stopping), len(zombies))
    assert result.paused.groups == tuple(PAUSED_GROUPS)
    assert result.paused.tenants == tuple(PAUSED_TENANTS)


def test_stats_at_scale_equal_a_brute_force_count_at_a_bounded_cost(db: Any, db_uri: str,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    seeded = seed(db, db_uri)
    commands = Commands()
    client: MongoClient[Any] = MongoClient(db_uri, tz_aware=True, event_listeners=[commands])
    try:
        admin = Admin(client.get_default_database(), clock=ManualClock(seeded.now))
        began = time.perf_counter()
        result = admin.stats()
        took = time.perf_counter() - began
        trips = [f"{name} {cmd.get('collection') if name == 'getMore' else coll}"
                 for name, coll, cmd in commands.events]
        documents = commands.documents
    finally:
        client.close()

    began = time.perf_counter()
    figures = check_depth(result, brute_depth(seeded))
    figures += check_windows(result, brute_windows(seeded))
    check_workers(result, seeded)
    checked_s = time.perf_counter() - began

    # Bounded: a fixed number of reads (a dozen, plus the getMores of the replies past a first batch:
    # the depth and count rows are one per (group, tenant, status, due-ness) and (group, tenant, why)
    # per slice, the samples at most SAMPLE_LIMIT per slice), whatever the number of jobs.
    keys = len(GROUPS) * (len(TENANTS) + 1)
    bound = keys * 2 * 2 + keys * len(set(WHYS)) * 3 + 30 + 3 * SAMPLE_LIMIT + 2 * WORKERS + 10
    assert len(trips) <= 30, trips
    assert documents <= bound
    with capsys.disabled():
        print(f"\nstats over {len(seeded.scheduled)} waiting and {len(seeded.archived)} archived jobs, "
              f"{len(TENANTS)} tenants, {len(GROUPS)} groups: seeded in {seeded.seconds:.0f} s; "
              f"admin.stats() took {took:.2f} s, {len(trips)} round trips, {documents} documents returned; "
              f"{figures} figures equal the brute-force count (checked in {checked_s:.1f} s)")
        print("round trips: " + ", ".join(f"{trip} x{n}" if n > 1 else trip for trip, n in Counter(trips).items()))

    # The command itself (on the server's clock: no job is due within a minute of the seeding, so the
    # depth it prints is the same) prints the same depth and its cost.
    out = CliRunner().invoke(main, ["stats", "--json", "--target", db_uri], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    printed = json.loads(out.stdout)
    depth = {g["group"]: g for g in printed["groups"]}
    for g in result.groups:
        for name in ("ready", "paused", "delayed", "retrying", "assigned", "running"):
            assert depth[g.group][name] == getattr(g.depth, name), (g.group, name)
    with capsys.disabled():
        print(f"recruiter stats --json: {printed['cost']['round_trips']} round trips, "
              f"{printed['cost']['documents']} documents returned")
    assert printed["cost"]["round_trips"] <= 30
