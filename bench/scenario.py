"""One design at one worker count: its processes on a fresh database, and the phases measured on them.

Phases, in order: throughput of no-op jobs, then of 100 ms jobs, each over a
steady window (:mod:`bench.steady`); ready-to-start latency with idle workers;
requests per second of idle workers; resident memory.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from bench import steady
from bench.jobs import GROUP, JOB_KINDS, Noop
from bench.procs import REPO, Fleet
from bench.server import Server
from bench.stats import difference, per_job, percentiles, totals
from recruiter.producer.client import Recruiter
from recruiter.store.clock import ServerClock
from recruiter.store.connection import parse_target, sync_client
from recruiter.store.indexes import ensure_indexes_sync
from recruiter.store.monitoring import CommandStats

# The product worker's documented defaults; the v1 worker gets the same backoff.
POLL_FROM = "20ms"
POLL_TO = "500ms"
HEARTBEAT = "5s"
HEARTBEAT_S = 5.0
POLL_TO_S = 0.5


@dataclass(frozen=True)
class Design:
    name: str
    prefetch: int | None = None  # the product worker's --prefetch, None: not passed (a product without it)
    recruiter_args: tuple[str, ...] = ()  # more options of `recruiter start` (bin/bench --recruiter-args)
    worker_extra: tuple[str, ...] = ()  # more options of `worker start` (the observed design)
    # Workers (slots) per worker process: W workers run as W / this processes of `--concurrency`
    # this many (bin/bench --slots-per-process); 1: one process per worker, as the peers run.
    slots_per_process: int = 1
    # The checkout whose code its processes run (bin/bench --designs-baseline-code); None: this one.
    code: Path | None = None
    batch: int = 0  # the product worker's --batch (0: not passed)

    @property
    def is_v1(self) -> bool:
        return self.name == "v1"

    @property
    def lanes(self) -> int:
        """Jobs one slot may hold at once: the running one and those it holds ahead."""
        return 1 + max(self.prefetch or 0, self.batch)

    def worker_args(self) -> list[str]:
        return ([] if self.prefetch is None else ["--prefetch", str(self.prefetch)]) + list(self.worker_extra) + (
            ["--batch", str(self.batch)] if self.batch else [])

    def processes(self, workers: int) -> tuple[int, int]:
        """The worker processes that run ``workers`` slots, and each one's ``--concurrency``."""
        per = 1 if self.is_v1 else min(self.slots_per_process, workers)
        if workers % per:
            raise ValueError(f"{workers} workers do not split into processes of {per}")
        return workers // per, per


def product_has_prefetch() -> bool:
    """Whether ``worker start`` has ``--prefetch`` (the look-ahead of issue 14)."""
    out = subprocess.run([sys.executable, "-m", "recruiter.cli", "worker", "start", "--help"],
                         capture_output=True, text=True, cwd=REPO, check=False).stdout
    return "--prefetch" in out


# The product as ``recruiter`` with every process observed: Prometheus metrics served (--metrics-port 0:
# any free port) on top of the event seam's log subscriber; chosen with --designs recruiter,recruiter-observed
# to print the cost of observing beside the same design without it.
OBSERVED = Design("recruiter-observed", 1, ("--metrics-port", "0"), ("--metrics-port", "0"))


# The product taking short jobs in batches (``worker start --batch 16``, recruiter.domain.batching), chosen with
# --designs recruiter,recruiter-batch to print it beside the default; a product without the option has no such design.
BATCH = Design("recruiter-batch", 1, batch=16)


def product_has_batch() -> bool:
    """Whether ``worker start`` has ``--batch`` (short jobs in batches, issue 40)."""
    out = subprocess.run([sys.executable, "-m", "recruiter.cli", "worker", "start", "--help"],
                         capture_output=True, text=True, cwd=REPO, check=False).stdout
    return "--batch" in out


def available_designs() -> list[Design]:
    """The product with its default look-ahead (``--prefetch 1``) and without (``--prefetch 0``,
    the hand-off of every job through a round), and v1. A product without the option runs
    as ``recruiter-prefetch0`` only (its behaviour is that of ``--prefetch 0``)."""
    if product_has_prefetch():
        return [Design("recruiter", 1), Design("recruiter-prefetch0", 0), Design("v1"), OBSERVED,
                *([BATCH] if product_has_batch() else [])]
    return [Design("recruiter-prefetch0", None), Design("v1")]


@dataclass(frozen=True)
class Sizes:
    warm_up_s: float
    window_s: float
    latency_samples: int
    latency_gap_s: tuple[float, float]
    idle_settle_s: float
    idle_window_s: float
    raw_ops: int
    notify_samples: int


FULL = Sizes(warm_up_s=3.0, window_s=12.0, latency_samples=15, latency_gap_s=(0.7, 1.0), idle_settle_s=2.0,
             idle_window_s=6.0, raw_ops=500, notify_samples=50)
QUICK = Sizes(warm_up_s=0.5, window_s=1.5, latency_samples=3, latency_gap_s=(0.2, 0.4), idle_settle_s=0.5,
              idle_window_s=2.5, raw_ops=50, notify_samples=10)


def backlog_bounds(kind: str, workers: int, lanes: int) -> tuple[int, int]:
    """The outstanding jobs a steady window keeps (low, high): above what the slots hold at once
    (``workers x lanes``) by what they take between two looks of the feeder, and more."""
    in_flight = workers * lanes
    if kind == "noop":
        low = in_flight + 20 + 2 * workers
        return low, low + 30 + 2 * workers
    low = in_flight + 2 + workers
    return low, low + 5 + workers


class Producer:
    """The bench's enqueuer: the product's ``Recruiter`` on a client counting its commands."""

    def __init__(self, uri: str, create_indexes: bool) -> None:
        self.stats = CommandStats()
        target = parse_target(uri)
        self.client = sync_client(target, app_name="bench-producer", event_listeners=[self.stats])
        clock = ServerClock()
        clock.calibrate_sync(self.client)
        self.rec = Recruiter(self.client, target.database, clock=clock)
        if create_indexes:
            ensure_indexes_sync(self.rec.db)

    def totals(self) -> dict[str, Any]:
        return totals([self.stats.snapshot()])

    def close(self) -> None:
        self.client.close()


def sum_kinds(parts: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"commands": {}}
    for part in parts:
        for k, v in part.items():
            if k not in ("commands", "targets"):
                out[k] = out.get(k, 0) + v
    return out


def window_figures(measured: dict[str, Any]) -> dict[str, Any]:
    """Per-job figures of a steady window, per process kind and for all (``before``/``after`` dropped)."""
    before, after = measured.pop("before"), measured.pop("after")
    phase = {k: difference(after[k], before.get(k, after[k])) for k in after}
    jobs = measured["jobs"]
    measured["per_job"] = {k: per_job(v, jobs) for k, v in phase.items()}
    measured["per_job"]["all"] = per_job(sum_kinds(phase.values()), jobs)
    measured["commands"] = {k: v["commands"] for k, v in phase.items()}
    return measured


@dataclass
class Scenario:
    design: Design
    workers: int
    sizes: Sizes
    fleet: Fleet
    producer: Producer
    observer: Any  # database handle on an unmonitored client: the bench's own reads

    def wait(self, condition: Any, timeout_s: float, what: str, interval_s: float = 0.05) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            self.fleet.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.design.name} x{self.workers}: timed out after {timeout_s:.0f}s "
                                   f"waiting for {what}")
            time.sleep(interval_s)

    def archived(self) -> int:
        return int(self.observer["archived"].estimated_document_count())

    def flush(self) -> dict[str, Any]:
        snap = self.fleet.flush()
        snap["enqueue"] = self.producer.totals()
        return snap

    def throughput(self, kind: str) -> dict[str, Any]:
        """Jobs of ``kind`` archived per second over a steady window, and what they cost."""
        cls = JOB_KINDS[kind]
        low, high = backlog_bounds(kind, self.workers, self.design.lanes)
        feed = steady.Feed(enqueue=lambda n: self.producer.rec.enqueue_many(cls() for _ in range(n)),
                           archived=self.archived, flush=self.flush, check=self.fleet.check_alive,
                           outstanding=lambda: steady.queued(self.observer),
                           what=f"{self.design.name} x{self.workers} {kind}")
        measured = steady.measure(feed, steady.Plan(low, high, self.sizes.warm_up_s, self.sizes.window_s))
        return window_figures(measured)

    def latency(self) -> dict[str, Any]:
        lo, hi = self.sizes.latency_gap_s
        values: list[float] = []
        for _ in range(self.sizes.latency_samples):
            time.sleep(random.uniform(lo, hi))
            job_id = self.producer.rec.enqueue(Noop())
            found: dict[str, Any] = {}

            def archived(job_id: Any = job_id, found: dict[str, Any] = found) -> bool:
                doc = self.observer["archived"].find_one({"_id": job_id}, {"scheduled_at": 1, "last_execution": 1})
                if doc:
                    found.update(doc)
                return doc is not None

            self.wait(archived, 60, "a latency job", interval_s=0.02)
            started_at = found["last_execution"]["started_at"]
            values.append((started_at - found["scheduled_at"]).total_seconds() * 1000)
        return {**percentiles(values), "values_ms": values}

    def idle(self) -> dict[str, Any]:
        a, b, seconds = self.fleet.idle_window(self.sizes.idle_settle_s, self.sizes.idle_window_s)
        per_process = {k: (b[k]["round_trips"] - a[k]["round_trips"]) / seconds / len(self.fleet.of_kind(k))
                       for k in b}
        d = difference(b["worker"], a["worker"])
        return {"seconds": seconds, "requests_per_s_per_process": per_process,
                "worker_requests_per_s": per_process["worker"],
                "worker_heartbeat_writes_per_s": d["heartbeat_writes"] / seconds / self.workers}

    def memory(self) -> dict[str, Any]:
        rss = [p.rss_kib() for p in self.fleet.of_kind("worker")]
        known = [r for r in rss if r is not None]
        out: dict[str, Any] = {"worker_rss_kib": known[0] if known else None,
                               "worker_rss_kib_mean": sum(known) / len(known) if known else None}
        for kind in ("recruiter", "cleaner"):
            procs = self.fleet.of_kind(kind)
            if procs:
                out[f"{kind}_rss_kib"] = procs[0].rss_kib()
        return out


@contextmanager
def scenario(server: Server, design: Design, workers: int, sizes: Sizes, work_dir: Path) -> Iterator[Scenario]:
    database = f"bench_{design.name.replace('-', '_')}_{workers}_{os.getpid()}"
    uri = server.database_uri(database)
    observer_client: MongoClient[Any] = MongoClient(uri, tz_aware=True)
    observer = observer_client[database]
    observer_client.drop_database(database)
    producer = Producer(uri, create_indexes=not design.is_v1)
    fleet = Fleet(uri, work_dir, code=design.code or REPO)
    try:
        if design.is_v1:
            ready = [work_dir / f"v1-ready-{i}" for i in range(workers)]
            for flag in ready:
                fleet.start("worker", ["-m", "bench.v1", "worker", "--target", uri, "--group", GROUP,
                                       "--poll-from", POLL_FROM, "--poll-to", POLL_TO, "--ready-file", str(flag)])
        else:
            ready = []
            fleet.product("recruiter", "start", *design.recruiter_args)
            fleet.product("cleaner", "cleaner", "start")
            processes, per = design.processes(workers)
            for _ in range(processes):
                fleet.product("worker", "worker", "start", "--group", GROUP, "--import-path", str(REPO),
                              "--poll-from", POLL_FROM, "--poll-to", POLL_TO, "--heartbeat-interval", HEARTBEAT,
                              *(("--concurrency", str(per)) if per > 1 else ()), *design.worker_args())
        s = Scenario(design, workers, sizes, fleet, producer, observer)
        s.wait(lambda: all(p.stats_path.exists() for p in fleet.procs), 120, "the processes to start")
        if design.is_v1:
            s.wait(lambda: all(f.exists() for f in ready), 60, "the v1 workers")
        else:
            entries = workers * design.lanes  # one roster entry per lane
            s.wait(lambda: observer["roster"].count_documents({}) >= entries, 60, "the workers to register")
            (recruiter,) = fleet.of_kind("recruiter")
            s.wait(lambda: recruiter_leads(observer, recruiter.pid), 60, "the recruiter to lead")
        yield s
    finally:
        fleet.stop()
        producer.close()
        observer_client.drop_database(database)
        observer_client.close()


def recruiter_leads(observer: Any, pid: int) -> bool:
    """Whether the recruiter process ``pid`` holds the lease (its owner is ``host:pid:id``), so runs
    its rounds: under load it was still making its indexes and taking the lease once the workers had
    registered, and a window saw no job done."""
    lease = observer["metadata"].find_one({"_id": "recruiter"}, {"owner": 1, "expires_at": 1}) or {}
    expires = lease.get("expires_at")
    return (f":{pid}:" in str(lease.get("owner")) and isinstance(expires, datetime)
            and expires > datetime.now(UTC))


def worker_path(window: dict[str, Any]) -> dict[str, float]:
    """Worker reads and writes per job in a steady window, idle polls and heartbeats left out.

    Idle polls are the reads (and, for v1, the claims) that found nothing; heartbeats
    are the commands on ``heartbeats`` the workers sent in the window (counted by target).
    """
    w = window["per_job"]["worker"]
    return {"reads": max(0.0, w["reads"] - w["empty_reads"] - w["heartbeat_reads"]),
            "writes": max(0.0, w["writes"] - w["empty_writes"] - w["heartbeat_writes"]),
            "idle_polls": w["empty_reads"] + w["empty_writes"], "heartbeat_writes": w["heartbeat_writes"]}


def run_scenario(server: Server, design: Design, workers: int, sizes: Sizes, work_dir: Path) -> dict[str, Any]:
    with scenario(server, design, workers, sizes, work_dir) as s:
        out: dict[str, Any] = {"workers": workers, "prefetch": design.prefetch}
        out["noop"] = s.throughput("noop")
        out["sleep100"] = s.throughput("sleep100")
        for kind in ("noop", "sleep100"):
            out[kind]["worker_path"] = worker_path(out[kind])
        out["latency"] = s.latency()
        out["idle"] = s.idle()
        out["memory"] = s.memory()
        return out
