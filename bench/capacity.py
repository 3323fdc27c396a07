"""Capacity of one leader (``bin/bench --capacity``): how many jobs per second one recruiter sustains.

One recruiter, one cleaner and many worker slots (default 8 processes x
``--concurrency 25`` = 200 slots, the product's default look-ahead) run no-op
jobs from a backlog kept non-empty (:mod:`bench.steady`, bounds above what the
slots hold at once). Over a steady window it reports the jobs archived per
second, the recruiter's rounds per second and jobs per round, and where a round's
time goes: the recruiter writes its per-phase timings
(``RECRUITER_ROUND_STATS``, :mod:`recruiter.processes.round_stats`): the reads
(plan), then in the fenced transaction its start and fence write, the outcomes
applied, the cursor, the locks, the assignment, the outcomes cleared, the commit.
The CPU seconds of the recruiter, the workers, the server and the bench itself in
the window tell whether the leader or the machine is the limit: a leader whose
rounds fill the window (busy near 100 %) is the limit. The documents each kind of
write wrote per job (lock, assign, clear, archive, delete, outcome, heartbeat,
enqueue: :data:`bench.write_counts.WRITE_KINDS`, from the write replies the processes count,
:mod:`recruiter.store.monitoring`) close the table. :func:`leader` sets up the
processes; the round-reads series (:mod:`bench.round_reads`) uses it too.

Why 8 x 25: slots in one process share one event loop, one change stream and one
client, so 200 slots cost 8 processes of about 40 MiB each, not 200; fewer
processes would make a worker's event loop (one CPU) the limit before the leader.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pymongo
from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import PyMongoError

from bench import steady
from bench.jobs import GROUP, Noop
from bench.procs import REPO, Fleet, Proc, cpu_seconds
from bench.scenario import HEARTBEAT, Producer, sum_kinds
from bench.server import Server
from bench.stats import difference

# retryable_line, retryable_per_job, writes_line and writes_per_job are named here too, as callers use them.
from bench.write_counts import retryable_line as retryable_line
from bench.write_counts import retryable_per_job as retryable_per_job
from bench.write_counts import retryable_row, writes_rows
from bench.write_counts import writes_line as writes_line
from bench.write_counts import writes_per_job as writes_per_job
from recruiter.processes.round_stats import PHASES, ROUND_STATS_ENVVAR


@dataclass(frozen=True)
class Layout:
    processes: int
    concurrency: int
    warm_up_s: float
    window_s: float

    @property
    def slots(self) -> int:
        return self.processes * self.concurrency


FULL = Layout(processes=8, concurrency=25, warm_up_s=5.0, window_s=15.0)
QUICK = Layout(processes=2, concurrency=3, warm_up_s=0.5, window_s=2.0)


def parse_layout(value: str, base: Layout) -> Layout | None:
    """``PxC`` (processes x concurrency), or ``none``."""
    if value.strip().lower() == "none":
        return None
    try:
        p, c = (int(v) for v in value.lower().split("x"))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not PROCESSESxCONCURRENCY (e.g. 8x25) nor 'none'") from None
    if p < 1 or c < 1:
        raise click.BadParameter("processes and concurrency must be positive")
    return Layout(p, c, base.warm_up_s, base.window_s)


def _read_rounds(path: Path, asked: float, timeout_s: float = 10.0) -> dict[str, Any]:
    """The recruiter's round timings written after ``asked`` (it writes them on SIGUSR2)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            snap: dict[str, Any] = json.loads(path.read_text())
            if snap["written_at"] >= asked:
                return snap
        except (OSError, ValueError, KeyError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"no fresh round timings in {path} after {timeout_s}s")
        time.sleep(0.01)


def rounds_between(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The round figures between two readings of the recruiter's round timings (committed rounds, idle ones, phases)."""
    rounds = after["rounds"] - before["rounds"]
    seconds = {p: after["seconds"].get(p, 0.0) - before["seconds"].get(p, 0.0) for p in PHASES}
    busy = sum(seconds.values()) + after["idle_seconds"] - before["idle_seconds"]
    elapsed = after["written_at"] - before["written_at"]
    in_rounds = sum(seconds.values())
    return {
        "rounds": rounds, "seconds": elapsed, "rounds_per_s": rounds / elapsed if elapsed else None,
        "idle_rounds": after["idle_rounds"] - before["idle_rounds"],
        "idle_ms_per_round": _idle_ms(before, after),
        "unfinished_rounds": after["unfinished"] - before["unfinished"],
        "assigned_per_round": (after["assigned"] - before["assigned"]) / rounds if rounds else None,
        "applied_per_round": (after["applied"] - before["applied"]) / rounds if rounds else None,
        "ms_per_round": {p: 1000 * s / rounds for p, s in seconds.items()} if rounds else {},
        "share": {p: s / in_rounds for p, s in seconds.items()} if in_rounds else {},
        "round_ms": 1000 * in_rounds / rounds if rounds else None,
        "leader_busy": busy / elapsed if elapsed else None,
    }


def _idle_ms(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """The reads of an idle round (one that found nothing to write), by phase, in ms."""
    idle = after["idle_rounds"] - before["idle_rounds"]
    if not idle:
        return {}
    was, now = before.get("idle_phases") or {}, after.get("idle_phases") or {}
    return {p: 1000 * (now.get(p, 0.0) - was.get(p, 0.0)) / idle for p in PHASES if p in now}


class _CpuClock:
    """CPU seconds per process kind (and the server's, and the bench's own) between two readings."""

    def __init__(self, fleet: Fleet, server_pid: int | None) -> None:
        self.fleet = fleet
        self.server_pid = server_pid
        self.marks: list[tuple[float, dict[str, float]]] = []

    def read(self) -> None:
        out: dict[str, float] = {}
        for p in self.fleet.procs:
            out[p.kind] = out.get(p.kind, 0.0) + (p.cpu_s() or 0.0)
        out["server"] = cpu_seconds(self.server_pid) or 0.0
        out["bench"] = cpu_seconds(os.getpid()) or 0.0
        self.marks.append((time.perf_counter(), out))

    def shares(self) -> dict[str, float]:
        """CPU used per kind over the window, in CPUs (1.0 = one core busy the whole window)."""
        (t0, a), (t1, b) = self.marks[-2:]
        return {k: (b[k] - a.get(k, 0.0)) / (t1 - t0) for k in b}


@dataclass
class Leader:
    """One recruiter (its round timings on), one cleaner and the worker slots of a layout, on a fresh
    database, every slot registered; the bench's producer and an observer beside them."""

    fleet: Fleet
    producer: Producer
    observer: Database[Any]
    recruiter: Proc
    rounds_path: Path
    lanes: int

    def archived(self) -> int:
        return int(self.observer["archived"].estimated_document_count())

    def enqueue(self, n: int) -> None:
        self.producer.rec.enqueue_many(Noop() for _ in range(n))

    def flush(self) -> dict[str, Any]:
        """Every process's command figures as of now, per kind; the producer's as ``enqueue``."""
        snap = self.fleet.flush()
        snap["enqueue"] = self.producer.totals()
        return snap

    def rounds(self) -> dict[str, Any]:
        """The recruiter's round timings as of now (asked for with SIGUSR2)."""
        asked = time.time()
        os.kill(self.recruiter.pid, signal.SIGUSR2)
        return _read_rounds(self.rounds_path, asked)


def _has_led(rounds_path: Path) -> bool:
    """Whether the recruiter has run a round (it writes its round timings from its start, before it
    has made its indexes and taken the lease: a window begun then measured its start-up, with no job done)."""
    try:
        snap = json.loads(rounds_path.read_text())
        return bool(snap["rounds"] + snap.get("idle_rounds", 0))  # a baseline's older code may count no idle ones
    except (OSError, ValueError, KeyError, TypeError):
        return False


def register_timeout_s(layout: Layout) -> float:
    """How long the slots may take to register: a worker process's start-up is slow on a busy machine."""
    return max(120.0, 15.0 * layout.processes)


@contextmanager
def leader(server: Server, layout: Layout, work_dir: Path, prefetch_args: list[str],
           recruiter_args: tuple[str, ...] = (), code: Path = REPO) -> Iterator[Leader]:
    """The processes of one leader's layout, started and registered; stopped and the database dropped after."""
    # A database per layout: a drop the server has not finished by the timeout below goes on
    # beside the next layout without being in its way.
    database = f"bench_capacity_{os.getpid()}_{work_dir.name.replace('-', '_')}"[:60]
    uri = server.database_uri(database)
    observer_client: MongoClient[Any] = MongoClient(uri, tz_aware=True)
    observer_client.drop_database(database)
    observer = observer_client[database]
    producer = Producer(uri, create_indexes=True)
    fleet = Fleet(uri, work_dir, code=code)
    rounds_path = work_dir / "recruiter.rounds.json"
    try:
        recruiter = fleet.product("recruiter", "start", *recruiter_args,
                                  extra_env={ROUND_STATS_ENVVAR: str(rounds_path)})
        fleet.product("cleaner", "cleaner", "start")
        for _ in range(layout.processes):
            fleet.product("worker", "worker", "start", "--group", GROUP, "--import-path", str(code),
                          "--concurrency", str(layout.concurrency), "--heartbeat-interval", HEARTBEAT,
                          *prefetch_args)
        lanes = 1 + int(prefetch_args[1]) if prefetch_args else 1
        _wait(fleet, lambda: all(p.stats_path.exists() for p in fleet.procs) and _has_led(rounds_path)
              and observer["roster"].count_documents({}) >= layout.slots * lanes, register_timeout_s(layout),
              "the slots to register and the recruiter to lead")
        yield Leader(fleet, producer, observer, recruiter, rounds_path, lanes)
    finally:
        fleet.stop()
        producer.close()
        _drop(observer_client, database)
        observer_client.close()


# How long the bench waits for a database's drop: the embedded server drops a big one key by key,
# which took over ten minutes after an 800-slot layout.
DROP_TIMEOUT_S = 60.0


def _drop(client: MongoClient[Any], database: str) -> None:
    try:
        with pymongo.timeout(DROP_TIMEOUT_S):
            client.drop_database(database)
    except PyMongoError as exc:
        print(f"bench: the drop of {database} did not end within {DROP_TIMEOUT_S:.0f} s ({type(exc).__name__}); "
              "the server goes on with it", file=sys.stderr)


def run(server: Server, layout: Layout, work_dir: Path, prefetch_args: list[str],
        recruiter_args: tuple[str, ...] = (), code: Path = REPO) -> dict[str, Any]:
    """The capacity scenario on a fresh database; figures as a dict (see the module doc)."""
    with leader(server, layout, work_dir, prefetch_args, recruiter_args, code) as lead:
        low = layout.slots * lead.lanes + max(50, layout.slots)
        cpu = _CpuClock(lead.fleet, server.pid)
        rounds: list[dict[str, Any]] = []

        def at_window(_end: str) -> None:
            rounds.append(lead.rounds())
            cpu.read()

        feed = steady.Feed(enqueue=lead.enqueue, archived=lead.archived, flush=lead.flush,
                           check=lead.fleet.check_alive, what="capacity",
                           outstanding=lambda: steady.queued(lead.observer), poll_s=0.2)
        measured = steady.measure(feed, steady.Plan(low, low + max(100, 2 * layout.slots), layout.warm_up_s,
                                                    layout.window_s), on_window=at_window, drain=False)
        before, after = measured.pop("before"), measured.pop("after")
        phase = {k: difference(after[k], before.get(k, after[k])) for k in after}
        jobs = measured["jobs"]
        everything = sum_kinds(phase.values())
        recruiter_rt = phase["recruiter"]["round_trips"]
        round_figures = rounds_between(rounds[0], rounds[1])
        return {
            "processes": layout.processes, "concurrency": layout.concurrency, "slots": layout.slots,
            "lanes": lead.lanes, **measured, **round_figures,
            "recruiter_round_trips_per_round": recruiter_rt / round_figures["rounds"] if round_figures["rounds"]
            else None,
            "recruiter_per_round": per_round(phase["recruiter"], round_figures["rounds"]),
            "round_trips_per_job": everything["round_trips"] / jobs if jobs else None,
            "empty_getmores_per_job": everything["empty_getmores"] / jobs if jobs else None,
            "writes_per_job": writes_per_job(phase, jobs),
            "retryable_per_job": retryable_per_job(phase, jobs),
            "cpu": cpu.shares(),
        }


def per_round(recruiter: dict[str, Any], rounds: int) -> dict[str, Any]:
    """The recruiter's commands (by ``command:collection``), the documents its reads returned and the
    bytes, per committed round; ``targets``: round trips, documents and bytes received of each
    ``command:collection`` per committed round."""
    if not rounds:
        return {}
    targets = recruiter.get("targets") or {}
    return {"commands": {k.lstrip("@"): v / rounds for k, v in recruiter["commands"].items() if k.startswith("@")},
            "round_trips": recruiter["round_trips"] / rounds, "documents": recruiter.get("documents", 0) / rounds,
            "request_bytes": recruiter["request_bytes"] / rounds, "reply_bytes": recruiter["reply_bytes"] / rounds,
            "targets": {t: {"round_trips": f["count"] / rounds, "documents": f["documents"] / rounds,
                            "reply_bytes": f["reply_bytes"] / rounds}
                        for t, f in sorted(targets.items()) if f["count"]}}


def _wait(fleet: Fleet, condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        fleet.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"capacity: timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.05)


def _commands(per_round: dict[str, Any]) -> str:
    if not per_round:
        return "-"
    top = sorted(per_round["commands"].items(), key=lambda kv: -kv[1])
    return (", ".join(f"{k} {v:.1f}" for k, v in top) + f"; {per_round['request_bytes'] / 1024:.0f} KiB sent, "
            f"{per_round['reply_bytes'] / 1024:.0f} KiB received")


def table(c: dict[str, Any]) -> str:
    """The capacity figures as printed lines."""
    ms = c["ms_per_round"]
    share = c["share"]
    phases = ", ".join(f"{p} {ms[p]:.1f} ms ({100 * share[p]:.0f}%)" for p in PHASES if p in ms)
    cpu = ", ".join(f"{k} {v:.2f}" for k, v in sorted(c["cpu"].items()))
    rt = c["recruiter_round_trips_per_round"]
    return "\n".join([
        "",
        f"capacity of one leader: {c['processes']} worker processes x --concurrency {c['concurrency']} = "
        f"{c['slots']} slots ({c['lanes']} lane(s) each), no-op jobs, steady window {c['seconds']:.1f} s"
        + (f"; recruiter start {' '.join(c['recruiter_args'])}" if c.get("recruiter_args") else "")
        + (f"; code of {c['code']}" if c.get("code") else ""),
        f"  {c['jobs_per_s']:.1f} jobs/s; {c['rounds_per_s'] or 0:.2f} rounds/s; "
        f"{c['assigned_per_round'] or 0:.1f} jobs assigned and {c['applied_per_round'] or 0:.1f} outcomes "
        f"applied per round; a round {c['round_ms'] or 0:.1f} ms; leader busy "
        f"{100 * min(1.0, c['leader_busy'] or 0):.0f}% (in rounds or their reads)",
        f"  round's time: {phases}",
        f"  {c['idle_rounds']} idle rounds (reads that found nothing to write), each: "
        + (", ".join(f"{p} {v:.1f} ms" for p, v in (c.get("idle_ms_per_round") or {}).items()) or "-"),
        f"  recruiter round trips per round {rt or 0:.1f}; all processes {c['round_trips_per_job'] or 0:.2f} "
        f"round trips per job ({c['empty_getmores_per_job'] or 0:.2f} of them empty getMore replies); "
        f"backlog never below {c['min_outstanding']} outstanding (low {c['low']})",
        f"  CPU in the window (cores): {cpu}",
        f"  recruiter per round: {_commands(c.get('recruiter_per_round') or {})}",
        f"  {writes_line(c.get('writes_per_job') or {})}",
        f"  {retryable_line(c.get('retryable_per_job') or {})}",
    ])


def comparison(before: dict[str, Any], after: dict[str, Any]) -> str:
    """Two capacity runs of the same layout side by side, with the ratios (after / before)."""
    def ratio(key: str) -> str:
        a, b = after.get(key) or 0, before.get(key) or 0
        return f"{a / b:.2f}x" if b else "-"

    def args(c: dict[str, Any]) -> str:
        code = (c.get("code") or "").split(" ")[0]  # a baseline's commit, when it ran other code
        return " ".join(filter(None, [code and f"code {code}", *(c.get("recruiter_args") or [])])) or "(defaults)"

    rows = [("", args(before), args(after), "after / before")]
    for key, label, fmt in (("jobs_per_s", "jobs/s", "{:.1f}"), ("round_ms", "ms per round", "{:.1f}"),
                            ("recruiter_round_trips_per_round", "recruiter round trips per round", "{:.1f}"),
                            ("round_trips_per_job", "round trips per job (all processes)", "{:.2f}"),
                            ("assigned_per_round", "jobs assigned per round", "{:.1f}")):
        rows.append((label, fmt.format(before.get(key) or 0), fmt.format(after.get(key) or 0), ratio(key)))
    rows.extend(writes_rows(before, after))
    rows.append(retryable_row(before, after))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["", f"capacity of one leader, {after['slots']} slots, side by side in one run:"]
    for r in rows:
        cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        lines.append("  " + "  ".join(cells))
    return "\n".join(lines)
