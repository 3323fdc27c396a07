"""The backlog series of ``bin/bench``: does a long queue slow the recruiter down?

For each backlog size (default 1 000, 10 000 and 100 000 queued no-op jobs) on a
fresh database, in one run:

1. setup: the jobs are enqueued with ``enqueue_many`` in batches of 1 000 (timed:
   the embedded server takes a while for 100 000);
2. the real processes start (recruiter, cleaner, 8 workers of the jobs' group);
   the **first round** figure is the time from their start to the first archived
   job: the new leader reads the keys of every queued job once there;
3. throughput is measured over the next ``measured`` jobs, with the backlog
   still at least ``size - measured - warm-up``: jobs archived per second, the
   recruiter's committed rounds in that window (``commitTransaction`` commands),
   seconds per round (the window over the rounds, waits included), and what the
   recruiter's candidate reads cost per round: ``find`` commands on ``scheduled``
   and the documents they returned.

Documents returned stand in for keys examined: SecantusDB's ``explain`` reports
the documents it returned as keys and documents examined, so its true walk is not
observable. With the query shapes of :mod:`recruiter.readahead` (equalities on
an index prefix and one range, no limit) the embedded server walks the index
entries it returns; MongoDB stops at the documents it returns.

The leader must never lose its lease: the lease's epoch (taken again = +1) is
read before and after, and the recruiter's log is searched for ``leader.lost``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from bench.jobs import GROUP, Noop
from bench.procs import REPO, Fleet
from bench.stats import read_stats
from recruiter.producer.client import Recruiter
from recruiter.store.clock import ServerClock
from recruiter.store.connection import parse_target, sync_client
from recruiter.store.indexes import ensure_indexes_sync

BATCH = 1_000
CANDIDATE_READS = "find:scheduled"


@dataclass(frozen=True)
class BacklogSizes:
    sizes: tuple[int, ...]
    workers: int
    warm_up: int
    measured: int


FULL = BacklogSizes(sizes=(1_000, 10_000, 100_000), workers=8, warm_up=20, measured=600)
QUICK = BacklogSizes(sizes=(60, 200), workers=2, warm_up=5, measured=30)


def enqueue(uri: str, database: str, count: int) -> float:
    """Enqueue ``count`` no-op jobs in batches; returns the seconds it took."""
    client = sync_client(parse_target(uri), app_name="bench-backlog-producer")
    try:
        clock = ServerClock()
        clock.calibrate_sync(client)
        rec = Recruiter(client, database, clock=clock)
        ensure_indexes_sync(rec.db)
        started = time.perf_counter()
        for start in range(0, count, BATCH):
            rec.enqueue_many(Noop() for _ in range(min(BATCH, count - start)))
        return time.perf_counter() - started
    finally:
        client.close()


def _recruiter_tallies(fleet: Fleet) -> dict[str, Any]:
    fleet.flush()  # makes every process write its stats file now
    (recruiter,) = fleet.of_kind("recruiter")
    stats = read_stats(recruiter.stats_path) or {"commands": {}, "targets": {}}
    commands, targets = stats["commands"], stats.get("targets", {})
    reads = targets.get(CANDIDATE_READS, {})
    return {"rounds": commands.get("commitTransaction", {}).get("count", 0),
            "finds": reads.get("count", 0), "documents": reads.get("documents", 0)}


def _epoch(db: Any) -> int | None:
    lease = db["metadata"].find_one({"_id": "recruiter"}, {"epoch": 1})
    return None if lease is None else lease.get("epoch")


def _wait(fleet: Fleet, condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        fleet.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"backlog: timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.05)


def measure(uri_of: Any, size: int, plan: BacklogSizes, work_dir: Path) -> dict[str, Any]:
    """One backlog size on its own database: setup, first round, then the measured window."""
    database = f"bench_backlog_{size}_{int(time.time())}"
    uri = uri_of(database)
    observer_client: MongoClient[Any] = MongoClient(uri, tz_aware=True)
    db = observer_client[database]
    observer_client.drop_database(database)
    fleet = Fleet(uri, work_dir)
    try:
        setup_s = enqueue(uri, database, size)
        fleet.product("recruiter", "start")
        fleet.product("cleaner", "cleaner", "start")
        for _ in range(plan.workers):
            fleet.product("worker", "worker", "start", "--group", GROUP, "--import-path", str(REPO))
        _wait(fleet, lambda: all(p.stats_path.exists() for p in fleet.procs), 120, "the processes to start")
        started = time.perf_counter()
        archived = db["archived"].estimated_document_count
        _wait(fleet, lambda: archived() >= plan.warm_up, 300, "the first jobs")
        first_s = time.perf_counter() - started
        before, epoch_before, base, t0 = _recruiter_tallies(fleet), _epoch(db), archived(), time.perf_counter()
        _wait(fleet, lambda: archived() >= base + plan.measured, 60 + plan.measured, "the measured jobs")
        t1, done = time.perf_counter(), archived() - base
        after, epoch_after = _recruiter_tallies(fleet), _epoch(db)
        seconds = t1 - t0
        rounds = max(1, after["rounds"] - before["rounds"])
        (recruiter,) = fleet.of_kind("recruiter")
        lost = recruiter.log_path.read_text(errors="replace").count("leader.lost")
        return {
            "queued": size, "workers": plan.workers, "setup_s": setup_s, "setup_jobs_per_s": size / setup_s,
            "first_round_s": first_s, "jobs": done, "seconds": seconds, "jobs_per_s": done / seconds,
            "rounds": after["rounds"] - before["rounds"], "s_per_round": seconds / rounds,
            "finds_per_round": (after["finds"] - before["finds"]) / rounds,
            "documents_per_round": (after["documents"] - before["documents"]) / rounds,
            "lease_taken_again": (epoch_after or 0) - (epoch_before or 0), "leader_lost_lines": lost,
            "queued_after": size - plan.warm_up - done,
        }
    finally:
        fleet.stop()
        observer_client.drop_database(database)
        observer_client.close()


def series(uri_of: Any, plan: BacklogSizes, work_dir: Path, echo: Any) -> dict[str, Any]:
    rows = {}
    for size in plan.sizes:
        echo(f"bench: backlog of {size} queued jobs, {plan.workers} workers...")
        size_dir = work_dir / f"backlog-{size}"
        size_dir.mkdir()
        rows[str(size)] = measure(uri_of, size, plan, size_dir)
    smallest, largest = rows[str(min(plan.sizes))], rows[str(max(plan.sizes))]
    return {"sizes": rows, "ratio": largest["jobs_per_s"] / smallest["jobs_per_s"],
            "lease_never_lost": all(r["lease_taken_again"] == 0 and r["leader_lost_lines"] == 0
                                    for r in rows.values()),
            "measured_jobs": plan.measured, "workers": plan.workers}


def table(result: dict[str, Any]) -> str:
    lines = ["", f"backlog series ({result['workers']} workers, {result['measured_jobs']} jobs measured per size; "
                 "docs/round = documents the recruiter's candidate reads returned, the proxy for keys examined):",
             f"  {'queued':>8} {'setup s':>8} {'first round s':>13} {'jobs/s':>8} {'s/round':>8} "
             f"{'finds/round':>11} {'docs/round':>10} {'lease lost':>10}"]
    for r in result["sizes"].values():
        lost = r["lease_taken_again"] + r["leader_lost_lines"]
        lines.append(f"  {r['queued']:>8} {r['setup_s']:>8.1f} {r['first_round_s']:>13.2f} {r['jobs_per_s']:>8.1f} "
                     f"{r['s_per_round']:>8.3f} {r['finds_per_round']:>11.1f} {r['documents_per_round']:>10.1f} "
                     f"{'no' if lost == 0 else 'YES'!s:>10}")
    sizes = sorted(int(s) for s in result["sizes"])
    lines.append(f"  throughput({sizes[-1]}) / throughput({sizes[0]}) = {result['ratio']:.2f} (target >= 0.8); "
                 f"leader lost its lease: {'never' if result['lease_never_lost'] else 'YES'}")
    return "\n".join(lines)
