"""``recruiter stats`` at the scale of issue 24 ("What it must show 1"): every figure checked.

``python -m bench.stats_scale [--queued 100000] [--archived 200000] [--tenants 50]`` seeds a
database directly, in batches of ``insert_many``, with documents shaped as the store writes them
(waiting jobs ready, delayed, retrying and assigned; archived jobs with their outcome and last
execution, over the last hour; roster entries and heartbeats of idle, busy, stopping and zombie
workers; pause switches), runs ``Admin.stats()`` once on a client with a command listener, and
checks every figure against a brute-force count made here, in Python, over the same documents.
It prints the seeding time, the read's time, its round trips (by command and collection) and the
documents returned, then the figures checked and any mismatch (exit status 1 if there is one).

``tests/integration/test_stats_scale.py`` runs the same seeding and checks at a smaller size (the
full size took 474 to 707 s to seed into the embedded server on a loaded 2-CPU machine). Uses the embedded server, or
``RECRUITER_TEST_MONGODB_URI``.
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import click
from bson import ObjectId
from pymongo import MongoClient

from bench.commands import Commands
from bench.jobs import Noop
from bench.server import running_server
from recruiter.admin import Admin, Stats
from recruiter.admin.stats import SAMPLE_LIMIT, WINDOWS_S, Window
from recruiter.domain.clock import ManualClock
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.store import ensure_indexes_sync

GROUPS = ("billing", "mail", "reports", "exports", "images")
PAUSED_GROUPS = ("exports",)
PAUSED_TENANTS = ("tenant-07", "tenant-33")
WORKERS = 60  # w00..w29 hold a job (even ones run it), w30..w59 idle; every tenth a zombie; w45 stopping
HOLDING = 30
BATCH = 10_000
WHYS = ("done",) * 17 + ("tried-too-many-times", "cancelled", "crashed-too-many-times")
DEPTH_FIELDS = ("ready", "paused", "delayed", "retrying", "assigned", "running")
MAX_ROUND_TRIPS = 30
Key = tuple[str, str]
Doc = dict[str, Any]


def ms(t: datetime) -> datetime:
    """A time as BSON keeps it (milliseconds)."""
    return t.replace(microsecond=t.microsecond // 1000 * 1000)


def tenant_names(n: int) -> tuple[str, ...]:
    return tuple(f"tenant-{i:02d}" for i in range(n))


@dataclass
class Seeded:
    now: datetime
    tenants: tuple[str, ...]
    scheduled: list[Doc] = field(default_factory=list)
    archived: list[Doc] = field(default_factory=list)
    beats: dict[str, Doc] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass
class Read:
    """One ``Admin.stats()``: its result, time, round trips (``command collection``) and documents returned."""

    stats: Stats
    seconds: float
    trips: list[str]
    documents: int

    def trips_text(self) -> str:
        return ", ".join(f"{t} x{n}" if n > 1 else t for t, n in Counter(self.trips).items())


def waiting_jobs(n: int, tenants: tuple[str, ...], template: Doc, now: datetime, rnd: random.Random) -> Iterable[Doc]:
    """Ready (due 1 min to 2 h ago), delayed (due in 10 min to 2 h), retrying (due or not): none due
    within a minute of ``now``, so a read on the server's clock a little later sees the same depth."""
    for i in range(n):
        kind = rnd.random()
        retrying = kind >= 0.85
        later = 0.6 <= kind < 0.75 or kind >= 0.92
        due = now + timedelta(seconds=rnd.uniform(600, 7200)) if later else now - timedelta(
            seconds=rnd.uniform(60, 7200))
        doc = {**template, "_id": ObjectId(), "group": rnd.choice(GROUPS), "priority": rnd.choice(("high", "low")),
               "scheduled_at": ms(due), "created_at": ms(min(due, now) - timedelta(seconds=5)),
               "status": "retrying" if retrying else "queued", "attempts": rnd.randint(1, 3) if retrying else 0}
        if i % 40:  # one job in 40 has no tenant
            doc["tenant"] = rnd.choice(tenants)
        yield doc


def archived_jobs(n: int, tenants: tuple[str, ...], template: Doc, now: datetime,
                  rnd: random.Random) -> Iterable[Doc]:
    """Archived over the last hour (one in 50 over the hour before), each at its own millisecond, so
    the newest N of a window are one set whatever the order of ties."""
    for i, at_ms in enumerate(rnd.sample(range(1, 3_600_000), n)):
        at = now - timedelta(milliseconds=at_ms + (3_600_000 if i % 50 == 0 else 0))
        due = ms(at - timedelta(seconds=rnd.uniform(0.5, 120)))
        why = rnd.choice(WHYS)
        execution: Doc = {"attempt": 1, "scheduled_at": due, "worker": "w00", "pid": 1000, "hostname": "vm"}
        if why != "cancelled" or i % 2:  # a job cancelled before it started has no start nor end
            execution.update(started_at=ms(due + (at - due) * rnd.uniform(0.1, 0.9)), ended_at=at,
                             outcome="done" if why == "done" else "failed")
        doc = {k: v for k, v in template.items() if k != "status"}
        doc.update(_id=ObjectId(), group=rnd.choice(GROUPS), tenant=rnd.choice(tenants), why=why, done=why == "done",
                   archived_at=at, attempts=1, scheduled_at=due, last_execution=execution, executions=[execution])
        yield doc


def _workers(db: Any, seeded: Seeded, template: Doc, rnd: random.Random) -> None:
    now = seeded.now
    entries, beats, locked = [], [], []
    for i in range(WORKERS):
        wid, session, group = f"w{i:02d}", ObjectId(), GROUPS[i % len(GROUPS)]
        entry: Doc = {"_id": wid, "work_on": [group], "available": i >= HOLDING, "session": session,
                      "created_at": now, "last_seen_at": now, "pid": 1000 + i, "hostname": "vm"}
        if i == 45:
            entry["stop_requested"] = True
        beat: Doc = {"_id": wid, "session": session, "last_seen_at": now - timedelta(seconds=1),
                     "fresh_until": now + timedelta(seconds=-20 if i % 10 == 9 else 30),
                     "heartbeat_interval_s": 5.0, "working": False}
        if i < HOLDING:
            token = ObjectId()
            job = {**template, "_id": ObjectId(), "group": group, "tenant": rnd.choice(seeded.tenants),
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


def _insert(collection: Any, docs: Iterable[Doc], kept: list[Doc]) -> None:
    batch: list[Doc] = []
    for doc in docs:
        batch.append(doc)
        if len(batch) == BATCH:
            collection.insert_many(batch, ordered=False)
            kept.extend(batch)
            batch = []
    if batch:
        collection.insert_many(batch, ordered=False)
        kept.extend(batch)


def seed(db: Any, queued: int, archived: int, tenants: int, *, seed_value: int = 24) -> Seeded:
    """Fill ``db`` (empty, its indexes made here) and return what was written, with the seeding time."""
    rnd = random.Random(seed_value)
    ensure_indexes_sync(db)
    now = ms(datetime.now(UTC))
    seeded = Seeded(now, tenant_names(tenants))
    template = dict(build_job_document(Noop(), JobOptions(), now))
    template.pop("tenant", None)
    began = time.perf_counter()
    _insert(db.scheduled, waiting_jobs(queued, seeded.tenants, template, now, rnd), seeded.scheduled)
    _insert(db.archived, archived_jobs(archived, seeded.tenants, template, now, rnd), seeded.archived)
    _workers(db, seeded, template, rnd)
    db.metadata.insert_one({"_id": "paused", "groups": list(PAUSED_GROUPS), "tenants": list(PAUSED_TENANTS)})
    seeded.seconds = time.perf_counter() - began
    return seeded


def read_stats(uri: str, now: datetime) -> Read:
    """``Admin.stats()`` at ``now`` on a client of its own, its commands counted."""
    commands = Commands()
    client: MongoClient[Any] = MongoClient(uri, tz_aware=True, event_listeners=[commands])
    try:
        admin = Admin(client.get_default_database(), clock=ManualClock(now))
        began = time.perf_counter()
        result = admin.stats()
        took = time.perf_counter() - began
        trips = [f"{name} {cmd.get('collection') if name == 'getMore' else coll}"
                 for name, coll, cmd in commands.events]
        return Read(result, took, trips, commands.documents)
    finally:
        client.close()


# -- the brute force --------------------------------------------------------------------------------


def nearest_rank(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def key_of(doc: Doc) -> Key:
    return doc["group"], doc.get("tenant") or ""


def brute_depth(seeded: Seeded) -> dict[Key, dict[str, Any]]:
    """Depth per (group, tenant), from every waiting document."""
    figures: dict[Key, dict[str, Any]] = defaultdict(lambda: defaultdict(int))
    oldest: dict[Key, datetime] = {}
    for d in seeded.scheduled:
        key = key_of(d)
        f = figures[key]
        if d["locked"]:
            beat = seeded.beats.get(d["locked_by"], {})
            f["running" if beat.get("working_on") == d["_id"] and beat.get("working_token") == d["lock_token"]
              else "assigned"] += 1
        elif d["scheduled_at"] <= seeded.now:
            f["ready"] += 1
            f["paused"] += d["group"] in PAUSED_GROUPS or d.get("tenant") in PAUSED_TENANTS
            oldest[key] = min(oldest.get(key, d["scheduled_at"]), d["scheduled_at"])
        else:
            f["retrying" if d["status"] == "retrying" else "delayed"] += 1
    for key, at in oldest.items():
        figures[key]["oldest_ready_s"] = (seeded.now - at).total_seconds()
    return figures


def brute_windows(seeded: Seeded, sample_limit: int = SAMPLE_LIMIT) -> dict[int, dict[str, Any]]:
    """Per window: archived and failed per key (exact), and the wait and run times the percentiles
    are defined over: every job, or the newest ``sample_limit`` of each slice (1 min, 1-5 min,
    5 min-1 h) when a slice holds more (then ``sampled``)."""
    now = seeded.now
    until = now + timedelta(milliseconds=1)
    slices = []
    for s in WINDOWS_S:
        since = now - timedelta(seconds=s)
        part = sorted((d for d in seeded.archived if since <= d["archived_at"] < until),
                      key=lambda d: d["archived_at"], reverse=True)
        slices.append((part, part[:sample_limit], len(part) > sample_limit))
        until = since
    out: dict[int, dict[str, Any]] = {}
    for i, s in enumerate(WINDOWS_S):
        counts: dict[Key, dict[str, Any]] = defaultdict(lambda: {"archived": 0, "failed": 0, "waits": [], "runs": []})
        for part, sample, _ in slices[: i + 1]:
            for d in part:
                counts[key_of(d)]["archived"] += 1
                counts[key_of(d)]["failed"] += d["why"] != "done"
            for d in sample:
                last = d["last_execution"]
                if "started_at" in last:
                    counts[key_of(d)]["waits"].append((last["started_at"] - last["scheduled_at"]).total_seconds())
                    counts[key_of(d)]["runs"].append((last["ended_at"] - last["started_at"]).total_seconds())
        out[s] = {"keys": counts, "sampled": any(sampled for _, _, sampled in slices[: i + 1])}
    return out


def _close(got: float | None, want: float | None) -> bool:
    if got is None or want is None:
        return got is want
    return math.isclose(got, want, abs_tol=1e-3)


def check_depth(result: Stats, expected: dict[Key, dict[str, Any]], bad: list[str]) -> int:
    """Compare every depth figure, per tenant and per group; the mismatches go to ``bad``; the figures compared."""
    figures = 0
    seen = set()
    for g in result.groups:
        for t in g.tenants:
            key = (g.group, t.tenant)
            seen.add(key)
            e, d = expected.get(key, {}), t.depth
            for name in DEPTH_FIELDS:
                if getattr(d, name) != e.get(name, 0):
                    bad.append(f"{key} {name}: {getattr(d, name)} != {e.get(name, 0)}")
            if not _close(d.oldest_ready_s, e.get("oldest_ready_s")):
                bad.append(f"{key} oldest_ready_s: {d.oldest_ready_s} != {e.get('oldest_ready_s')}")
            figures += len(DEPTH_FIELDS) + 1
        for name in DEPTH_FIELDS:
            want = sum(expected.get((g.group, t.tenant), {}).get(name, 0) for t in g.tenants)
            if getattr(g.depth, name) != want:
                bad.append(f"{g.group} {name}: {getattr(g.depth, name)} != {want}")
            figures += 1
    missing = {k for k, e in expected.items() if any(e.get(n) for n in DEPTH_FIELDS)} - seen
    if missing:
        bad.append(f"missing from the stats: {sorted(missing)}")
    return figures


def _check_window(w: Window, e: dict[str, Any], sampled: bool, where: str, bad: list[str]) -> None:
    if (w.archived, w.failed) != (e.get("archived", 0), e.get("failed", 0)):
        bad.append(f"{where} archived/failed: {(w.archived, w.failed)} != {(e.get('archived', 0), e.get('failed', 0))}")
    if w.sampled != sampled:
        bad.append(f"{where} sampled: {w.sampled}")
    for name in ("wait", "run"):
        for p in (50, 95):
            want = nearest_rank(e.get(f"{name}s", []), p)
            if not _close(getattr(w, f"{name}_p{p}_s"), want):
                bad.append(f"{where} {name} p{p}: {getattr(w, f'{name}_p{p}_s')} != {want}")


def check_windows(result: Stats, expected: dict[int, dict[str, Any]], bad: list[str]) -> int:
    """Compare every window figure (counts exact; percentiles over the defined sample)."""
    figures = 0
    listed = {(g.group, t.tenant) for g in result.groups for t in g.tenants}
    if not set(expected[WINDOWS_S[-1]]["keys"]) <= listed:
        bad.append("an archived (group, tenant) of the last hour is missing from the stats")
    for g in result.groups:
        for t in g.tenants:
            for w in t.windows:
                _check_window(w, expected[w.seconds]["keys"].get((g.group, t.tenant), {}),
                              expected[w.seconds]["sampled"], f"{(g.group, t.tenant)} {w.seconds}s", bad)
                figures += 7
        for i, w in enumerate(g.windows):
            if (w.archived, w.failed) != (sum(t.windows[i].archived for t in g.tenants),
                                          sum(t.windows[i].failed for t in g.tenants)):
                bad.append(f"{g.group} {w.seconds}s: the group's counts are not its tenants' sum")
            figures += 2
    return figures


def check_workers(result: Stats, bad: list[str]) -> int:
    zombies = {i for i in range(WORKERS) if i % 10 == 9}
    stopping = {45} - zombies
    busy = set(range(HOLDING)) - zombies
    idle = set(range(HOLDING, WORKERS)) - zombies - stopping
    w = result.workers
    want = (len(idle), len(busy), len(stopping), len(zombies))
    if (w.idle, w.busy, w.stopping, w.zombies) != want:
        bad.append(f"workers idle/busy/stopping/zombies: {(w.idle, w.busy, w.stopping, w.zombies)} != {want}")
    if (result.paused.groups, result.paused.tenants) != (PAUSED_GROUPS, PAUSED_TENANTS):
        bad.append(f"paused: {result.paused}")
    return 6


def check(result: Stats, seeded: Seeded) -> tuple[int, list[str]]:
    """Every figure of ``result`` against the brute force: (figures compared, mismatches)."""
    bad: list[str] = []
    figures = check_depth(result, brute_depth(seeded), bad)
    figures += check_windows(result, brute_windows(seeded), bad)
    figures += check_workers(result, bad)
    return figures, bad


def documents_bound(tenants: int) -> int:
    """The most documents one read may return: one depth row per (group, tenant, status, due-ness),
    one count row per (group, tenant, why) per slice, the locked jobs, the samples, the roster and
    heartbeats, the switches and leases."""
    keys = len(GROUPS) * (tenants + 1)
    return keys * 4 + keys * len(set(WHYS)) * 3 + HOLDING + 3 * SAMPLE_LIMIT + 2 * WORKERS + 10


@click.command()
@click.option("--queued", default=100_000, show_default=True, help="Waiting jobs.")
@click.option("--archived", default=200_000, show_default=True, help="Archived jobs.")
@click.option("--tenants", default=50, show_default=True)
def main(queued: int, archived: int, tenants: int) -> None:
    with running_server() as server:
        uri = server.database_uri("bench_stats_scale")
        client: MongoClient[Any] = MongoClient(uri, tz_aware=True)
        try:
            db = client.get_default_database()
            client.drop_database(db.name)
            print(f"server: {server.description}")
            seeded = seed(db, queued, archived, tenants)
            print(f"seeded {len(seeded.scheduled)} waiting and {len(seeded.archived)} archived jobs over "
                  f"{tenants} tenants in {seeded.seconds:.0f} s")
            read = read_stats(uri, seeded.now)
            print(f"admin.stats(): {read.seconds:.2f} s, {len(read.trips)} round trips, {read.documents} documents "
                  f"returned (bound {documents_bound(tenants)})")
            print(f"round trips: {read.trips_text()}")
            began = time.perf_counter()
            figures, bad = check(read.stats, seeded)
            print(f"{figures} figures compared with the brute-force count in {time.perf_counter() - began:.1f} s: "
                  f"{len(bad)} mismatches")
            for line in bad[:20]:
                print(f"  {line}")
            if bad or len(read.trips) > MAX_ROUND_TRIPS or read.documents > documents_bound(tenants):
                sys.exit(1)
        finally:
            client.drop_database("bench_stats_scale")
            client.close()


if __name__ == "__main__":
    main()
