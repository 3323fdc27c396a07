"""``bin/bench``: the central recruiter and the v1 baseline, side by side, in one run.

For each design and each worker count it starts the real processes on a fresh
database and measures, in this order:

1. warm-up (a few jobs, not counted);
2. throughput of no-op jobs, then of 100 ms jobs: one ``enqueue_many``, timed
   until every job is archived. Round trips and bytes per job are summed per
   process kind over the whole phase and over a steady-state window (between
   20 % and 80 % of the jobs archived, with the backlog never empty);
3. ready-to-start latency with idle workers: jobs enqueued one at a time, each
   after an idle gap; latency is ``last_execution.started_at - scheduled_at``
   (both on the server's clock, millisecond resolution);
4. requests per second of idle workers (command stats over a quiet window);
5. resident memory of the worker processes.

Reference figures (the server's raw operation rate and change-notification
latency) are measured first, in the same run. Output: a table, JSON in
``bench/results/`` (``<timestamp>.json`` and ``latest.json``) and a PNG plot.
"""

from __future__ import annotations

import json
import os
import platform
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import bson
import click
from pymongo import MongoClient

from bench import backlog, report
from bench.jobs import GROUP, JOB_KINDS, Noop
from bench.procs import REPO, Fleet
from bench.reference import notification_latency, raw_rates
from bench.server import Server, running_server
from bench.stats import difference, per_job, percentiles, totals
from recruiter.producer.client import Recruiter
from recruiter.store.clock import ServerClock
from recruiter.store.connection import parse_target, sync_client
from recruiter.store.indexes import ensure_indexes_sync
from recruiter.store.monitoring import STATS_ENVVAR, CommandStats

# The product worker's documented defaults; the v1 worker gets the same backoff.
POLL_FROM = "20ms"
POLL_TO = "500ms"
HEARTBEAT = "5s"
HEARTBEAT_S = 5.0
POLL_TO_S = 0.5


@dataclass(frozen=True)
class Design:
    name: str
    wake: str | None = None  # the product worker's --wake mode, when it has one

    @property
    def is_v1(self) -> bool:
        return self.name == "v1"


@dataclass(frozen=True)
class Sizes:
    noop_base: int
    noop_per_worker: int
    sleep_base: int
    sleep_per_worker: int
    latency_samples: int
    latency_gap_s: tuple[float, float]
    idle_settle_s: float
    idle_window_s: float
    raw_ops: int
    notify_samples: int

    def noop_jobs(self, workers: int) -> int:
        return self.noop_base + self.noop_per_worker * workers

    def sleep_jobs(self, workers: int) -> int:
        return self.sleep_base + self.sleep_per_worker * workers


FULL = Sizes(noop_base=100, noop_per_worker=15, sleep_base=10, sleep_per_worker=8, latency_samples=15,
             latency_gap_s=(0.7, 1.0), idle_settle_s=2.0, idle_window_s=10.0, raw_ops=500, notify_samples=50)
QUICK = Sizes(noop_base=10, noop_per_worker=5, sleep_base=4, sleep_per_worker=2, latency_samples=3,
              latency_gap_s=(0.2, 0.4), idle_settle_s=0.5, idle_window_s=2.5, raw_ops=50, notify_samples=10)


def product_wake_modes() -> list[str] | None:
    """The worker's ``--wake`` choices if the product has the option (else it only polls)."""
    out = subprocess.run([sys.executable, "-m", "recruiter.cli", "worker", "start", "--help"],
                         capture_output=True, text=True, cwd=REPO, check=False).stdout
    if "--wake" not in out:
        return None
    return [m for m in ("change-stream", "poll") if m in out]


def available_designs() -> list[Design]:
    modes = product_wake_modes()
    product = [Design(f"recruiter-{m}", m) for m in modes or []] or [Design("recruiter")]
    return [*product, Design("v1")]


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

    # -- phases -----------------------------------------------------------------------

    def run_batch(self, kind: str, count: int, sample_assignments: bool = False) -> dict[str, Any]:
        before = self.fleet.flush()
        before["enqueue"] = self.producer.totals()
        base = self.archived()
        cls = JOB_KINDS[kind]
        marks = [0.2, 0.8]
        window: list[tuple[float, float, dict[str, dict[str, Any]]]] = []
        assignment_sizes: list[int] = []
        next_sample = 0.0
        started = time.perf_counter()
        self.producer.rec.enqueue_many(cls() for _ in range(count))
        enqueued = time.perf_counter()
        deadline = time.monotonic() + 60 + count * 0.5
        while (done := self.archived() - base) < count:
            if marks and done >= marks[0] * count and done < count:
                marks.pop(0)
                snap, at = self.fleet.flush(), time.perf_counter()
                window.append(((done + self.archived() - base) / 2, at, snap))
            if sample_assignments and time.monotonic() >= next_sample:
                next_sample = time.monotonic() + 0.25
                assignment_sizes += self._assignment_sizes()
            self.fleet.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.design.name} x{self.workers}: {kind} batch of {count} not archived "
                                   f"({done} done)")
            time.sleep(0.02)
        elapsed = time.perf_counter() - started
        after = self.fleet.flush()
        after["enqueue"] = self.producer.totals()
        phase = {k: difference(after[k], before[k]) for k in after}
        result: dict[str, Any] = {
            "jobs": count, "seconds": elapsed, "jobs_per_s": count / elapsed, "enqueue_s": enqueued - started,
            "per_job": {k: per_job(v, count) for k, v in phase.items()},
            "commands": {k: v["commands"] for k, v in phase.items()},
        }
        result["per_job"]["all"] = per_job(_sum(phase.values()), count)
        if len(window) == 2 and window[1][0] > window[0][0]:
            (c0, t0, s0), (c1, t1, s1) = window
            jobs = c1 - c0
            steady = {k: per_job(difference(s1[k], s0[k]), jobs) for k in s1}
            result["steady"] = {"jobs": jobs, "seconds": t1 - t0, "per_job": steady}
        if assignment_sizes:
            result["assigned_to_bytes"] = {"mean": sum(assignment_sizes) / len(assignment_sizes),
                                           "max": max(assignment_sizes), "samples": len(assignment_sizes)}
        return result

    def _assignment_sizes(self) -> list[int]:
        docs = self.observer["roster"].find({"assigned_to": {"$exists": True}}, {"assigned_to": 1})
        return [len(bson.encode({"assigned_to": d["assigned_to"]})) for d in docs]

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
        time.sleep(self.sizes.idle_settle_s)
        a, t0 = self.fleet.flush(), time.perf_counter()
        time.sleep(self.sizes.idle_window_s)
        b, t1 = self.fleet.flush(), time.perf_counter()
        seconds = t1 - t0
        per_process = {k: (b[k]["round_trips"] - a[k]["round_trips"]) / seconds / len(self.fleet.of_kind(k))
                       for k in b}
        # What an idle worker writes that is not a failed claim: its heartbeats.
        d = difference(b["worker"], a["worker"])
        heartbeats = (d["writes"] - d["empty_writes"]) / seconds / self.workers
        return {"seconds": seconds, "requests_per_s_per_process": per_process,
                "worker_requests_per_s": per_process["worker"], "worker_heartbeat_writes_per_s": heartbeats}

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


def _sum(parts: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"commands": {}}
    for part in parts:
        for k, v in part.items():
            if k != "commands":
                out[k] = out.get(k, 0) + v
    return out


@contextmanager
def scenario(server: Server, design: Design, workers: int, sizes: Sizes, work_dir: Path) -> Iterator[Scenario]:
    database = f"bench_{design.name.replace('-', '_')}_{workers}_{os.getpid()}"
    uri = server.database_uri(database)
    observer_client: MongoClient[Any] = MongoClient(uri, tz_aware=True)
    observer = observer_client[database]
    observer_client.drop_database(database)
    producer = Producer(uri, create_indexes=not design.is_v1)
    fleet = Fleet(uri, work_dir)
    try:
        if design.is_v1:
            ready = [work_dir / f"v1-ready-{i}" for i in range(workers)]
            for flag in ready:
                fleet.start("worker", ["-m", "bench.v1", "worker", "--target", uri, "--group", GROUP,
                                       "--poll-from", POLL_FROM, "--poll-to", POLL_TO, "--ready-file", str(flag)])
        else:
            ready = []
            fleet.product("recruiter", "start")
            fleet.product("cleaner", "cleaner", "start")
            wake = ["--wake", design.wake] if design.wake else []
            for _ in range(workers):
                fleet.product("worker", "worker", "start", "--group", GROUP, "--import-path", str(REPO),
                              "--poll-from", POLL_FROM, "--poll-to", POLL_TO, "--heartbeat-interval", HEARTBEAT,
                              *wake)
        s = Scenario(design, workers, sizes, fleet, producer, observer)
        s.wait(lambda: all(p.stats_path.exists() for p in fleet.procs), 120, "the processes to start")
        if design.is_v1:
            s.wait(lambda: all(f.exists() for f in ready), 60, "the v1 workers")
        else:
            s.wait(lambda: observer["roster"].count_documents({}) >= workers, 60, "the workers to register")
        yield s
    finally:
        fleet.stop()
        producer.close()
        observer_client.drop_database(database)
        observer_client.close()


def run_scenario(server: Server, design: Design, workers: int, sizes: Sizes, work_dir: Path) -> dict[str, Any]:
    with scenario(server, design, workers, sizes, work_dir) as s:
        s.run_batch("noop", max(2, workers))  # warm-up: imports, connections, indexes
        out: dict[str, Any] = {"workers": workers}
        out["noop"] = s.run_batch("noop", sizes.noop_jobs(workers), sample_assignments=not design.is_v1)
        out["sleep100"] = s.run_batch("sleep100", sizes.sleep_jobs(workers))
        out["latency"] = s.latency()
        out["idle"] = s.idle()
        out["memory"] = s.memory()
        # The product's worker heartbeats once per interval per process; v1 has no heartbeat.
        heartbeats_per_s = 0.0 if design.is_v1 else 1 / HEARTBEAT_S
        for kind in ("noop", "sleep100"):
            steady = out[kind].get("steady")
            if steady:
                steady["worker_path"] = worker_path(steady, workers, heartbeats_per_s)
        return out


def worker_path(steady: dict[str, Any], workers: int, heartbeats_per_s: float) -> dict[str, float]:
    """Worker reads and writes per job in a steady-state window, idle polls and heartbeats left out.

    Idle polls are the reads (and, for v1, the claims) that found nothing; heartbeats
    are the configured rate over the window (the idle phase's measured rate,
    ``worker_heartbeat_writes_per_s``, counts whole heartbeats in a few seconds:
    too coarse to subtract).
    """
    w = steady["per_job"]["worker"]
    heartbeat_writes = heartbeats_per_s * steady["seconds"] * workers / steady["jobs"]
    return {"reads": w["reads"] - w["empty_reads"],
            "writes": max(0.0, w["writes"] - w["empty_writes"] - heartbeat_writes),
            "idle_polls": w["empty_reads"] + w["empty_writes"], "heartbeat_writes": heartbeat_writes}


def machine() -> dict[str, Any]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu": cpu, "platform": platform.platform(),
            "python": platform.python_version()}


def parse_counts(value: str) -> list[int]:
    try:
        counts = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of numbers") from None
    if not counts or any(c < 1 for c in counts):
        raise click.BadParameter("worker counts must be positive")
    return counts


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--workers", "workers_spec", default=None, envvar="RECRUITER_BENCH_WORKERS", show_envvar=True,
              help="Worker counts, comma-separated (default 1,2,4,8,16; --quick: 1,2).")
@click.option("--quick", is_flag=True, envvar="RECRUITER_BENCH_QUICK", show_envvar=True,
              help="Tiny sizes: a smoke test, not a measurement.")
@click.option("--noop-jobs", type=click.IntRange(1), default=None, envvar="RECRUITER_BENCH_NOOP_JOBS",
              show_envvar=True, help="No-op jobs per worker (the batch also has a fixed base).")
@click.option("--sleep-jobs", type=click.IntRange(1), default=None, envvar="RECRUITER_BENCH_SLEEP_JOBS",
              show_envvar=True, help="100 ms jobs per worker (the batch also has a fixed base).")
@click.option("--latency-samples", type=click.IntRange(1), default=None, envvar="RECRUITER_BENCH_LATENCY_SAMPLES",
              show_envvar=True, help="Jobs enqueued one at a time for the latency figures.")
@click.option("--designs", default=None, envvar="RECRUITER_BENCH_DESIGNS", show_envvar=True,
              help="Comma-separated subset of the designs (default: all; the list is in the output).")
@click.option("--output", type=click.Path(path_type=Path), default=REPO / "bench" / "results",
              envvar="RECRUITER_BENCH_OUTPUT", show_envvar=True, show_default=True, help="Directory for JSON and PNG.")
@click.option("--no-plot", is_flag=True, help="Skip the PNG (no matplotlib needed).")
@click.option("--backlogs", "backlogs_spec", default=None, envvar="RECRUITER_BENCH_BACKLOGS", show_envvar=True,
              help="Queued-job counts of the backlog series, comma-separated (default 1000,10000,100000; "
                   "--quick: 60,200); 'none' skips the series.")
@click.option("--only-backlog", is_flag=True, envvar="RECRUITER_BENCH_ONLY_BACKLOG", show_envvar=True,
              help="Run the backlog series alone (no designs, no worker counts).")
def main(workers_spec: str | None, quick: bool, noop_jobs: int | None, sleep_jobs: int | None,
         latency_samples: int | None, designs: str | None, output: Path, no_plot: bool,
         backlogs_spec: str | None, only_backlog: bool) -> None:
    """Benchmark the recruiter against the v1 baseline; print a table, write JSON and a PNG."""
    os.environ.pop(STATS_ENVVAR, None)  # the bench counts its own commands on its producer only
    sizes = _sizes(quick, noop_jobs, sleep_jobs, latency_samples)
    workers = parse_counts(workers_spec or ("1,2" if quick else "1,2,4,8,16"))
    backlog_plan, run_backlog = _backlog_plan(quick, backlogs_spec, only_backlog)
    chosen = _chosen_designs(only_backlog, designs)
    output.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    work_dir = output / f"{stamp}-work"
    work_dir.mkdir()
    begun = time.perf_counter()
    with running_server() as server:
        click.echo(f"bench: {server.description}; designs {', '.join(d.name for d in chosen)}; "
                   f"workers {','.join(map(str, workers))}{' (quick)' if quick else ''}", err=True)
        reference_uri = server.database_uri(f"bench_reference_{os.getpid()}")
        reference = {"raw": raw_rates(reference_uri, sizes.raw_ops),
                     "notification": notification_latency(reference_uri, sizes.notify_samples)}
        MongoClient(reference_uri).drop_database(f"bench_reference_{os.getpid()}")
        results = _run_designs(server, chosen, workers, sizes, work_dir)
        backlog_result = _run_backlog(server, backlog_plan, work_dir) if run_backlog else None
        server_description = server.description
    doc: dict[str, Any] = {
        "meta": {"started_at": stamp, "seconds": time.perf_counter() - begun, "machine": machine(),
                 "server": server_description, "quick": quick, "workers": workers,
                 "designs": [asdict(d) for d in chosen], "sizes": asdict(sizes),
                 "settings": {"poll_from": POLL_FROM, "poll_to": POLL_TO, "heartbeat_s": HEARTBEAT_S,
                              "log_level": "warning"},
                 "counted": "command events of the application's clients (PyMongo CommandListener); "
                            "server-monitoring hellos and connection handshakes are not command events"},
        "reference": reference,
        "results": results,
        "backlog": backlog_result,
    }
    doc["targets"] = report.targets(doc, heartbeat_s=HEARTBEAT_S, poll_to_s=POLL_TO_S) if results else []
    _write_and_show(doc, output, stamp, no_plot=no_plot)


def _sizes(quick: bool, noop_jobs: int | None, sleep_jobs: int | None, latency_samples: int | None) -> Sizes:
    """The batch sizes: --quick or full, with the per-worker counts given on the command line."""
    sizes = QUICK if quick else FULL
    changes: dict[str, Any] = {}
    if noop_jobs:
        changes["noop_per_worker"] = noop_jobs
    if sleep_jobs:
        changes["sleep_per_worker"] = sleep_jobs
    if latency_samples:
        changes["latency_samples"] = latency_samples
    if changes:
        sizes = Sizes(**{**asdict(sizes), **changes})
    return sizes


def _backlog_plan(quick: bool, backlogs_spec: str | None, only_backlog: bool) -> tuple[backlog.BacklogSizes, bool]:
    """The backlog series to run (--backlogs), and whether to run it at all."""
    backlog_plan = backlog.QUICK if quick else backlog.FULL
    if backlogs_spec and backlogs_spec.strip().lower() != "none":
        backlog_plan = backlog.BacklogSizes(tuple(parse_counts(backlogs_spec)), backlog_plan.workers,
                                            backlog_plan.warm_up, backlog_plan.measured)
    run_backlog = not (backlogs_spec and backlogs_spec.strip().lower() == "none")
    if only_backlog and not run_backlog:
        raise click.BadParameter("--only-backlog with --backlogs none leaves nothing to run")
    return backlog_plan, run_backlog


def _chosen_designs(only_backlog: bool, designs: str | None) -> list[Design]:
    """The designs to run: all, the --designs subset, or none with --only-backlog."""
    chosen = [] if only_backlog else available_designs()
    if designs:
        names = [d.strip() for d in designs.split(",") if d.strip()]
        unknown = sorted(set(names) - {d.name for d in chosen})
        if unknown:
            raise click.BadParameter(f"unknown design(s) {', '.join(unknown)}; available: "
                                     f"{', '.join(d.name for d in chosen)}", param_hint="--designs")
        chosen = [d for d in chosen if d.name in names]
    return chosen


def _run_designs(server: Server, chosen: list[Design], workers: list[int], sizes: Sizes,
                 work_dir: Path) -> dict[str, dict[str, Any]]:
    """Every chosen design at every worker count: design -> worker count -> figures."""
    results: dict[str, dict[str, Any]] = {}
    for design in chosen:
        results[design.name] = {}
        for n in workers:
            click.echo(f"bench: {design.name} with {n} worker(s)...", err=True)
            scenario_dir = work_dir / f"{design.name}-{n}"
            scenario_dir.mkdir()
            try:
                results[design.name][str(n)] = run_scenario(server, design, n, sizes, scenario_dir)
            except RuntimeError as exc:
                raise click.ClickException(f"{exc} (process logs in {scenario_dir})") from None
    return results


def _run_backlog(server: Server, backlog_plan: backlog.BacklogSizes, work_dir: Path) -> dict[str, Any]:
    """The backlog series (bench/backlog.py)."""
    backlog_dir = work_dir / "backlog"
    backlog_dir.mkdir()
    try:
        return backlog.series(server.database_uri, backlog_plan, backlog_dir,
                              lambda line: click.echo(line, err=True))
    except RuntimeError as exc:
        raise click.ClickException(f"{exc} (process logs in {backlog_dir})") from None


def _write_and_show(doc: dict[str, Any], output: Path, stamp: str, *, no_plot: bool) -> None:
    """Write the JSON (stamped and latest.json), print the tables, draw the plot."""
    results, backlog_result = doc["results"], doc["backlog"]
    (output / f"{stamp}.json").write_text(json.dumps(doc, indent=1, default=str))
    (output / "latest.json").write_text(json.dumps(doc, indent=1, default=str))
    if results:
        click.echo(report.table(doc))
        click.echo(report.target_table(doc["targets"]))
    if backlog_result is not None:
        click.echo(backlog.table(backlog_result))
    if not no_plot and results:
        png = report.plot(doc, output / f"{stamp}.png")
        click.echo(f"bench: plot {png}", err=True)
    click.echo(f"bench: results {output / f'{stamp}.json'} (also latest.json), "
               f"{doc['meta']['seconds']:.0f}s", err=True)


if __name__ == "__main__":
    main()
