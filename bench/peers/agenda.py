"""Agenda (the Node.js MongoDB job queue) as a series of ``bin/bench``, on the bench's server.

The Node side is in ``bench/peers/agenda/``: ``package.json`` and ``package-lock.json``
pin Agenda, its MongoDB backend and the driver; :func:`install` runs ``npm ci`` into
``bench/peers/agenda/node_modules`` on first use (not committed). ``worker.mjs`` is
one Agenda worker process, ``enqueue.mjs`` the enqueuer (jobs asked for on its stdin).
Both count their own commands (the driver's command monitoring) in stats files of
the shape the Python processes write, so :class:`bench.procs.Fleet` reads and sums
them as it does the recruiter's.

Two series (:data:`VARIANTS`): ``agenda``, woken by change streams, and ``agenda-poll``,
polling only. For each worker count: ``n`` worker processes, each with the variant's
:class:`Settings` (concurrency 1, like a recruiter worker's one slot), and the same
phases as a design (:mod:`bench.scenario`): no-op and 100 ms throughput over a steady
window, enqueue-to-start latency with idle workers, requests per second of an idle
worker, and a worker's resident memory; each throughput phase on fresh processes and
a fresh database. A job's run is counted when
the worker records it (collection ``bench_runs``, on an unmonitored client, in
batches every 100 ms), so the records are not part of Agenda's commands.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import select
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from bench import steady
from bench.procs import REPO, Fleet, Proc
from bench.scenario import Sizes, backlog_bounds, window_figures
from bench.server import Server
from bench.stats import percentiles, read_stats, totals

AGENDA_DIR = REPO / "bench" / "peers" / "agenda"
RUNS = "bench_runs"
ENQUEUER_WAIT_S = 120.0  # for the enqueuer to start, or to answer (a hung one is killed: the phase fails)
LATENCY_WAIT_S = 20.0  # an idle Agenda worker that has not started a job by then has stalled


@dataclass(frozen=True)
class Settings:
    """Agenda's options in the bench, chosen for low latency (docs/benchmarks.md, "Peers")."""

    concurrency: int = 1  # jobs one worker process runs at once: one slot, like a recruiter worker
    process_every_ms: int = 100  # the poll interval, where Agenda's default is 5 s
    lock_lifetime_ms: int = 30_000  # a lock older than this is taken again (default 10 min)
    lock_limit: int = 2  # jobs one process may hold locked: the running one and one ahead (--prefetch 1)
    notify: str = "changestream"  # MongoChangeStreamNotificationChannel: new jobs wake the workers; or "poll"

    def worker_args(self) -> list[str]:
        return ["--concurrency", str(self.concurrency), "--process-every", str(self.process_every_ms),
                "--lock-lifetime", str(self.lock_lifetime_ms), "--lock-limit", str(self.lock_limit),
                "--notify", self.notify]


SETTINGS = Settings()
# The series of the peer section: Agenda woken by change streams (its lowest latency on MongoDB alone),
# and Agenda polling only (MongoBackend's own mode), both with SETTINGS' other options.
VARIANTS = {"agenda": SETTINGS, "agenda-poll": Settings(notify="poll")}
# The SIGKILL test's lock lifetime: how long a killed worker's jobs stay locked (its 1 s jobs fit well inside).
KILL_LOCK_LIFETIME_MS = 5000


def missing() -> str | None:
    """Why the Agenda series cannot run here (no ``node`` or ``npm``), or None."""
    absent = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    return f"{' and '.join(absent)} not found on PATH" if absent else None


def install() -> None:
    """``npm ci`` into ``bench/peers/agenda/node_modules`` unless it already matches the lock file."""
    marker = AGENDA_DIR / "node_modules" / ".package-lock.json"
    lock = AGENDA_DIR / "package-lock.json"
    if marker.exists() and marker.stat().st_mtime >= lock.stat().st_mtime:
        return
    done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=AGENDA_DIR, capture_output=True,
                          text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"npm ci in {AGENDA_DIR} failed: {(done.stderr or done.stdout)[-1500:]}")


def versions() -> dict[str, str]:
    """The installed versions of Agenda, its MongoDB backend and the driver, and node's."""
    out = {"node": subprocess.run(["node", "--version"], capture_output=True, text=True,
                                  check=False).stdout.strip()}
    for package in ("agenda", "@agendajs/mongo-backend", "mongodb"):
        manifest = AGENDA_DIR / "node_modules" / package / "package.json"
        try:
            out[package] = json.loads(manifest.read_text())["version"]
        except (OSError, ValueError, KeyError):
            out[package] = "?"
    return out


def start_node(fleet: Fleet, kind: str, script: str, args: list[str], *, pipe: bool = False) -> Proc:
    """A Node process of ``bench/peers/agenda`` (its stats file and log named like the others); a worker
    joins ``fleet``, whose ``flush`` asks it for figures with SIGUSR2; the enqueuer (``pipe``) is asked
    on its stdin."""
    n = sum(p.kind == kind for p in fleet.procs)
    stats_path = fleet.work_dir / f"{kind}-{n}.stats.json"
    log_path = fleet.work_dir / f"{kind}-{n}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECRUITER_")}
    with open(log_path, "wb") as log:
        popen = subprocess.Popen(["node", script, "--uri", fleet.uri, "--stats", str(stats_path), *args],
                                 cwd=AGENDA_DIR, env=env, stderr=log,
                                 stdout=subprocess.PIPE if pipe else log,
                                 stdin=subprocess.PIPE if pipe else subprocess.DEVNULL)
    proc = Proc(kind, popen, stats_path, log_path)
    if not pipe:
        fleet.procs.append(proc)
    return proc


class Enqueuer:
    """Talks to ``enqueue.mjs``: one line asks for jobs, one line answers with their ids."""

    def __init__(self, fleet: Fleet) -> None:
        self.proc = start_node(fleet, "enqueue", "enqueue.mjs", [], pipe=True)
        self._in: IO[bytes] = self.proc.popen.stdin  # type: ignore[assignment]
        self._out: IO[bytes] = self.proc.popen.stdout  # type: ignore[assignment]
        if self._readline(ENQUEUER_WAIT_S).strip() != b"ready":
            raise RuntimeError(f"the Agenda enqueuer did not start: {self.proc.log_path.read_text()[-1500:]}")

    def _readline(self, timeout_s: float) -> bytes:
        """Its next line; b"" (and the process killed) when none comes within ``timeout_s``."""
        if not select.select([self._out], [], [], timeout_s)[0]:
            self.proc.popen.kill()
            return b""
        return self._out.readline()

    def ask(self, line: str) -> list[str]:
        self._in.write(f"{line}\n".encode())
        self._in.flush()
        answer = self._readline(ENQUEUER_WAIT_S).decode().split()
        if len(answer) != 3 or answer[0] != "ok":
            raise RuntimeError(f"the Agenda enqueuer answered {answer!r}: {self.proc.log_path.read_text()[-1500:]}")
        return answer[2].split(",")

    def enqueue(self, name: str, count: int) -> list[str]:
        return self.ask(f"{name} {count}")

    def totals(self) -> dict[str, Any]:
        """Its commands so far (it writes its stats file before it answers)."""
        self.ask("stats")
        return totals([read_stats(self.proc.stats_path)])

    def stop(self) -> None:
        if self.proc.popen.poll() is None:
            with contextlib.suppress(OSError):
                self._in.close()
            try:
                self.proc.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.popen.kill()
                self.proc.popen.wait(5)


@dataclass
class AgendaRun:
    """Agenda workers and the enqueuer on one fresh database."""

    workers: int
    fleet: Fleet
    enqueuer: Enqueuer
    observer: Any  # the database, on an unmonitored client

    def runs(self) -> int:
        return int(self.observer[RUNS].estimated_document_count())

    def wait(self, condition: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            self.fleet.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"agenda x{self.workers}: timed out after {timeout_s:.0f}s waiting for {what}")
            time.sleep(0.02)

    def flush(self) -> dict[str, Any]:
        snap = self.fleet.flush()
        snap["enqueue"] = self.enqueuer.totals()
        return snap

    def throughput(self, kind: str, sizes: Sizes, settings: Settings) -> dict[str, Any]:
        low, high = backlog_bounds(kind, self.workers, settings.lock_limit)
        feed = steady.Feed(enqueue=lambda n: self.enqueuer.enqueue(kind, n), archived=self.runs,
                           flush=self.flush, check=self.fleet.check_alive, what=f"agenda x{self.workers} {kind}")
        plan = steady.Plan(low, high, sizes.warm_up_s, sizes.window_s)
        return window_figures(steady.measure(feed, plan, drain=False))

    def latency(self, sizes: Sizes) -> dict[str, Any]:
        lo, hi = sizes.latency_gap_s
        values: list[float] = []
        for _ in range(sizes.latency_samples):
            time.sleep(random.uniform(lo, hi))
            job = self.enqueuer.enqueue("noop", 1)[0]
            found: dict[str, Any] = {}

            def recorded(job: str = job, found: dict[str, Any] = found) -> bool:
                doc = self.observer[RUNS].find_one({"job": job})
                if doc:
                    found.update(doc)
                return doc is not None

            self.wait(recorded, LATENCY_WAIT_S, "a latency job")
            values.append((found["started"] - found["scheduled"]).total_seconds() * 1000)
        return {**percentiles(values), "values_ms": values}

    def idle(self, sizes: Sizes) -> dict[str, Any]:
        """Requests per second of one idle worker process (its polls and change-stream waits)."""
        a, b, seconds = self.fleet.idle_window(sizes.idle_settle_s, sizes.idle_window_s)
        return {"seconds": seconds,
                "worker_requests_per_s": (b["worker"]["round_trips"] - a["worker"]["round_trips"]) / seconds
                / self.workers}

    def memory(self) -> dict[str, Any]:
        known = [r for r in (p.rss_kib() for p in self.fleet.of_kind("worker")) if r is not None]
        return {"worker_rss_kib": known[0] if known else None,
                "worker_rss_kib_mean": sum(known) / len(known) if known else None}


@contextmanager
def agenda_run(server: Server, workers: int, work_dir: Path, settings: Settings,
               extra: tuple[str, ...] = ()) -> Iterator[AgendaRun]:
    database = f"bench_agenda_{workers}_{os.getpid()}"
    uri = server.database_uri(database)
    # A server that stops answering (seen once, busy at 16 workers) fails the phase instead of the run.
    client: MongoClient[Any] = MongoClient(uri, tz_aware=True, socketTimeoutMS=120_000)
    client.drop_database(database)
    fleet = Fleet(uri, work_dir)
    enqueuer: Enqueuer | None = None
    try:
        enqueuer = Enqueuer(fleet)  # creates Agenda's indexes before the workers start
        ready = [work_dir / f"agenda-ready-{i}" for i in range(workers)]
        for flag in ready:
            start_node(fleet, "worker", "worker.mjs", [*settings.worker_args(), "--ready", str(flag), *extra])
        run = AgendaRun(workers, fleet, enqueuer, client[database])
        run.wait(lambda: all(f.exists() for f in ready), 60, "the Agenda workers to start")
        yield run
    finally:
        if enqueuer is not None:
            enqueuer.stop()
        fleet.stop()
        client.drop_database(database)
        client.close()


def _phase(server: Server, workers: int, work_dir: Path, settings: Settings,
           measure: Callable[[AgendaRun], dict[str, Any]]) -> dict[str, Any]:
    """One phase on fresh processes and a fresh database; a phase that fails (Agenda stalled, a process
    died) is recorded as ``{"error": ...}`` and the series goes on."""
    work_dir.mkdir()
    try:
        with agenda_run(server, workers, work_dir, settings) as run:
            return measure(run)
    except (RuntimeError, PyMongoError) as exc:
        return {"error": str(exc)[:500]}


def run_workers(server: Server, workers: int, sizes: Sizes, work_dir: Path,
                settings: Settings = SETTINGS) -> dict[str, Any]:
    """The figures of one worker count: throughput of no-op and 100 ms jobs, latency, idle requests, memory.

    Each throughput phase runs on fresh processes and is not drained (Agenda may not drain a backlog
    in time: the jobs left would run in the next phase); latency, idle requests and memory are
    measured on a third set of processes, idle."""
    out: dict[str, Any] = {"workers": workers}
    for kind in ("noop", "sleep100"):

        def throughput(run: AgendaRun, kind: str = kind) -> dict[str, Any]:
            return run.throughput(kind, sizes, settings)

        out[kind] = _phase(server, workers, work_dir / kind, settings, throughput)

    def idle_phases(run: AgendaRun) -> dict[str, Any]:
        return {"latency": run.latency(sizes), "idle": run.idle(sizes), "memory": run.memory()}

    idle = _phase(server, workers, work_dir / "idle", settings, idle_phases)
    if "error" in idle:
        out["latency"] = idle
    else:
        out.update(idle)
    return out


def series(server: Server, workers: list[int], sizes: Sizes, work_dir: Path, say: Callable[[str], None],
           settings: Settings = SETTINGS, name: str = "agenda") -> dict[str, Any]:
    """Agenda at every worker count; ``{"settings", "versions", "results": {count: figures}}``."""
    install()
    out: dict[str, Any] = {"settings": asdict(settings), "versions": versions(), "results": {}}
    for n in workers:
        say(f"bench: {name} with {n} worker(s)...")
        point_dir = work_dir / f"{name}-{n}"
        point_dir.mkdir()
        out["results"][str(n)] = run_workers(server, n, sizes, point_dir, settings)
        for kind in ("noop", "sleep100", "latency"):
            if "error" in out["results"][str(n)].get(kind, {}):
                say(f"bench: {name} with {n} worker(s): {kind} failed: {out['results'][str(n)][kind]['error']}")
    return out
