"""What the way workers learn of their work costs: this code beside an earlier checkout, side by side.

``python -m bench.wake_cost [--baseline-code PATH] [--processes 16] [--packed 8] [--quick]`` runs,
for each code (the baseline first, when given; each series on a fresh embedded server):

- ``spread``: 100 ms jobs on ``--processes`` single-slot worker processes, over a steady window:
  jobs/s, its share of ideal (slots / 0.1 s) and the server's CPU per job;
- ``packed``: the same slots as processes of ``--packed`` slots each (``--concurrency``), the same
  figures; the ratios spread/packed say what each process costs beyond its slots;
- ``idle``: ``--processes`` idle single-slot worker processes: the server's CPU (share of one core)
  and the worker processes' requests per second over an idle window, then enqueue-to-start
  latency of single jobs enqueued one at a time (p50, p95).

Issue 40's targets: spread/packed server CPU per job at most 1.15x and jobs/s at least 0.9x; 100 ms
jobs at 16 processes at least 0.5 of ideal; idle, at most 5 % of a core and a p50 under 40 ms. The
server's CPU is an embedded server's, read from ``/proc`` (``-`` for an external one). On a shared
machine the absolute figures move with its load; the ratios between series of one run are what count.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from bench import steady
from bench.jobs import JOB_KINDS
from bench.procs import REPO, cpu_seconds, describe_code
from bench.scenario import FULL, QUICK, Design, Scenario, Sizes, backlog_bounds, scenario
from bench.server import Server, running_server
from bench.stats import difference

JOB_S = 0.1  # the sleep100 job


@dataclass(frozen=True)
class Series:
    name: str
    processes: int
    slots_per_process: int

    @property
    def slots(self) -> int:
        return self.processes * self.slots_per_process


def _cpu(server: Server) -> float | None:
    return cpu_seconds(server.pid) if server.pid is not None else None


def steady_sleep100(s: Scenario, server: Server) -> dict[str, Any]:
    """100 ms jobs over a steady window, with the server's CPU over that same window."""
    cls = JOB_KINDS["sleep100"]
    low, high = backlog_bounds("sleep100", s.workers, s.design.lanes)
    cpu: dict[str, float | None] = {}
    feed = steady.Feed(enqueue=lambda n: s.producer.rec.enqueue_many(cls() for _ in range(n)),
                       archived=s.archived, flush=s.flush, check=s.fleet.check_alive,
                       outstanding=lambda: steady.queued(s.observer), what=f"wake_cost x{s.workers} sleep100")
    measured = steady.measure(feed, steady.Plan(low, high, s.sizes.warm_up_s, s.sizes.window_s),
                              lambda when: cpu.__setitem__(when, _cpu(server)), drain=False)
    start, end = cpu.get("start"), cpu.get("end")
    jobs = measured["jobs"]
    before, after = measured["before"], measured["after"]
    workers = difference(after["worker"], before.get("worker", after["worker"])) if "worker" in after else {}
    return {"jobs_per_s": measured["jobs_per_s"], "of_ideal": measured["jobs_per_s"] * JOB_S / s.workers,
            "server_cpu_ms_per_job": None if start is None or end is None or not jobs
            else 1000 * (end - start) / jobs,
            # The workers' requests per job, and of them their reads of their roster entries (the polls).
            "worker_requests_per_job": workers.get("round_trips", 0) / jobs if jobs else None,
            "worker_reads_per_job": (workers.get("commands") or {}).get("@find:roster", 0) / jobs if jobs else None}


def idle(s: Scenario, server: Server) -> dict[str, Any]:
    """Idle workers: the server's CPU share and the workers' requests per second; then start latency."""
    time.sleep(s.sizes.idle_settle_s)
    a, cpu0, t0 = s.fleet.flush(), _cpu(server), time.perf_counter()
    time.sleep(s.sizes.idle_window_s)
    b, cpu1, t1 = s.fleet.flush(), _cpu(server), time.perf_counter()
    seconds = t1 - t0
    worker_rps = (b["worker"]["round_trips"] - a["worker"]["round_trips"]) / seconds
    latency = s.latency()
    return {"server_core_share": None if cpu0 is None or cpu1 is None else (cpu1 - cpu0) / seconds,
            "worker_requests_per_s": worker_rps, "latency_p50_ms": latency["p50_ms"],
            "latency_p95_ms": latency["p95_ms"]}


def run_series(series: Series, code: Path, sizes: Sizes, work_dir: Path) -> dict[str, Any]:
    design = Design("recruiter", 1, slots_per_process=series.slots_per_process, code=code)
    with running_server() as server, scenario(server, design, series.slots, sizes, work_dir) as s:
        if series.name == "idle":
            return idle(s, server)
        return steady_sleep100(s, server)


def ratios(figures: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """spread / packed: server CPU per job and jobs/s."""
    spread, packed = figures.get("spread") or {}, figures.get("packed") or {}

    def ratio(key: str) -> float | None:
        a, b = spread.get(key), packed.get(key)
        return None if a is None or not b else a / b

    return {"cpu_per_job": ratio("server_cpu_ms_per_job"), "jobs_per_s": ratio("jobs_per_s")}


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def show(results: dict[str, dict[str, dict[str, Any]]], processes: int, packed: int) -> None:
    for code, figures in results.items():
        spread, pack, still = figures.get("spread", {}), figures.get("packed", {}), figures.get("idle", {})
        r = ratios(figures)
        print(f"{code}:")
        for layout, f in ((f"{processes}x1", spread), (f"{processes // packed}x{packed}", pack)):
            print(f"  100 ms jobs, {layout}: {_cell(f.get('jobs_per_s'), '.1f')} jobs/s "
                  f"({_cell(f.get('of_ideal'), '.2f')} of ideal), server CPU "
                  f"{_cell(f.get('server_cpu_ms_per_job'), '.2f')} ms/job; worker requests "
                  f"{_cell(f.get('worker_requests_per_job'), '.2f')}/job, of them reads of their entries "
                  f"{_cell(f.get('worker_reads_per_job'), '.2f')}/job")
        print(f"  {processes}x1 over {processes // packed}x{packed}: server CPU per job "
              f"{_cell(r['cpu_per_job'], '.2f')}x, jobs/s {_cell(r['jobs_per_s'], '.2f')}x")
        share = still.get("server_core_share")
        print(f"  idle, {processes}x1: server {_cell(None if share is None else 100 * share, '.1f')}% of a core, "
              f"workers {_cell(still.get('worker_requests_per_s'), '.1f')} requests/s in all, enqueue-to-start p50 "
              f"{_cell(still.get('latency_p50_ms'), '.1f')} ms, p95 {_cell(still.get('latency_p95_ms'), '.1f')} ms")


@click.command()
@click.option("--baseline-code", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="An earlier checkout (e.g. `git worktree add /tmp/base main`), run first, side by side.")
@click.option("--processes", type=click.IntRange(2), default=16, show_default=True,
              help="Single-slot worker processes (spread and idle series).")
@click.option("--packed", type=click.IntRange(1), default=8, show_default=True,
              help="Slots per process of the packed series (must divide --processes).")
@click.option("--series", "series_text", default="spread,packed,idle", show_default=True,
              help="Which series, comma-separated.")
@click.option("--quick", is_flag=True, help="Short windows and few latency samples (a smoke run, not a measure).")
def main(baseline_code: Path | None, processes: int, packed: int, series_text: str, quick: bool) -> None:
    if processes % packed:
        raise click.BadParameter(f"{packed} does not divide {processes}", param_hint="--packed")
    wanted = [s.strip() for s in series_text.split(",") if s.strip()]
    known = {"spread": Series("spread", processes, 1), "packed": Series("packed", processes // packed, packed),
             "idle": Series("idle", processes, 1)}
    unknown = [w for w in wanted if w not in known]
    if unknown or not wanted:
        raise click.BadParameter(f"{series_text!r}: series are spread, packed, idle", param_hint="--series")
    sizes = QUICK if quick else FULL
    codes = {**({f"baseline ({describe_code(baseline_code)})": baseline_code} if baseline_code else {}),
             f"this code ({describe_code(REPO)})": REPO}
    results: dict[str, dict[str, dict[str, Any]]] = {label: {} for label in codes}
    with tempfile.TemporaryDirectory(prefix="recruiter-wake-cost-") as tmp:
        # The series take turns between the codes, so a change in the machine's load hits both alike.
        for name in wanted:
            for i, (label, code) in enumerate(codes.items()):
                # A directory of its own per run: a stats file an earlier run left would pass for a
                # process of this one started (bench.scenario waits for the files).
                work_dir = Path(tmp) / f"{name}-{i}"
                work_dir.mkdir()
                results[label][name] = run_series(known[name], code, sizes, work_dir)
                print(json.dumps({"series": name, "code": label, **results[label][name]}), flush=True)
    print("wake cost, each series on a fresh embedded server; figures from a shared, loaded machine: "
          "compare the ratios of one run")
    show(results, processes, packed)
    print(json.dumps({"results": results, "ratios": {k: ratios(v) for k, v in results.items()}}))


if __name__ == "__main__":
    main()
