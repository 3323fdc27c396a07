"""``bin/bench``: the central recruiter and the v1 baseline, side by side, in one run.

Designs: the product with its default look-ahead (``recruiter``: ``worker start
--prefetch 1``), the product without it (``recruiter-prefetch0``: every job handed
over by a round) and the seed's v1 loop (:mod:`bench.v1`). For each design and
each worker count it starts the real processes on a fresh database and measures
(:mod:`bench.scenario`):

1. throughput of no-op jobs, then of 100 ms jobs, each over a steady window of at
   least ``--window`` seconds (12 by default) after a warm-up, with the backlog fed
   and never empty (:mod:`bench.steady`); round trips and bytes per job per process
   kind in that window, with and without the server's empty ``getMore`` replies;
2. ready-to-start latency with idle workers (``last_execution.started_at -
   scheduled_at``, both on the server's clock);
3. requests per second of idle workers, and resident memory.

Reference figures (the server's raw operation rate and change-notification
latency) are measured first, in the same run; then the capacity of one leader
(:mod:`bench.capacity`, ``--capacity`` runs it alone), the backlog series
(:mod:`bench.backlog`) and the peers (:mod:`bench.peers`: Agenda at the same worker
counts, Celery at one; one SIGKILLed worker of Agenda and of the recruiter; ``--peers-only`` runs them beside the
recruiter alone, ``--no-peers`` leaves them out). ``--round-reads`` runs the round-reads
series alone (:mod:`bench.round_reads`: what a round reads at several roster sizes with
the same job rate). Output: tables, the targets of issue 14 (met / missed),
JSON in ``--output`` (``<timestamp>.json``, ``latest.json``) and a PNG plot;
``--publish`` also writes ``docs/bench.json`` and ``docs/bench.png``.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click
from pymongo import MongoClient

from bench import aging, backlog, capacity, report, round_reads, scenario
from bench.peers import table as peers
from bench.procs import REPO, describe_code
from bench.reference import notification_latency, raw_rates
from bench.scenario import Design, Sizes, available_designs, run_scenario
from bench.server import Server, running_server
from recruiter.store.monitoring import STATS_ENVVAR

DOCS = REPO / "docs"


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


FC = TypeVar("FC", bound=Callable[..., Any])


def _baseline_code_option(part: str, dest: str, help_text: str) -> Callable[[FC], FC]:
    """``--<part>-baseline-code DIR`` (env ``RECRUITER_BENCH_<PART>_BASELINE_CODE``): a checkout
    whose code a part of the run measures first, beside this one's."""
    return click.option(f"--{part}-baseline-code", dest, default=None,
                        type=click.Path(exists=True, file_okay=False, path_type=Path),
                        envvar=f"RECRUITER_BENCH_{part.upper().replace('-', '_')}_BASELINE_CODE", show_envvar=True,
                        help=help_text)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--workers", "workers_spec", default=None, envvar="RECRUITER_BENCH_WORKERS", show_envvar=True,
              help="Worker counts, comma-separated (default 1,2,4,8,16; --quick: 1,2).")
@click.option("--slots-per-process", type=click.IntRange(1), default=1, envvar="RECRUITER_BENCH_SLOTS_PER_PROCESS",
              show_envvar=True,
              help="Run the recruiter's W workers as W / N worker processes of --concurrency N (default 1: one "
                   "process per worker, as v1 and the peers run); each worker count must split evenly.")
@click.option("--quick", is_flag=True, envvar="RECRUITER_BENCH_QUICK", show_envvar=True,
              help="Tiny sizes: a smoke test, not a measurement.")
@click.option("--window", "window_s", type=click.FloatRange(0.5), default=None, envvar="RECRUITER_BENCH_WINDOW",
              show_envvar=True, help="Seconds of each throughput point's steady window (default 12; --quick: 1.5; "
                             "the round-reads series: 30, --quick: 2).")
@click.option("--warm-up", "warm_up_s", type=click.FloatRange(0), default=None, envvar="RECRUITER_BENCH_WARM_UP",
              show_envvar=True,
              help="Seconds fed before each window opens (default 3; --quick: 0.5; the round-reads series: 5).")
@click.option("--latency-samples", type=click.IntRange(1), default=None, envvar="RECRUITER_BENCH_LATENCY_SAMPLES",
              show_envvar=True, help="Jobs enqueued one at a time for the latency figures.")
@click.option("--designs", default=None, envvar="RECRUITER_BENCH_DESIGNS", show_envvar=True,
              help="Comma-separated subset of the designs (recruiter, recruiter-prefetch0, v1; default: all).")
@click.option("--output", type=click.Path(path_type=Path), default=REPO / "bench" / "results",
              envvar="RECRUITER_BENCH_OUTPUT", show_envvar=True, show_default=True, help="Directory for JSON and PNG.")
@click.option("--publish", is_flag=True, envvar="RECRUITER_BENCH_PUBLISH", show_envvar=True,
              help="Also write docs/bench.json and docs/bench.png (the committed run).")
@click.option("--no-plot", is_flag=True, help="Skip the PNG (no matplotlib needed).")
@click.option("--backlogs", "backlogs_spec", default=None, envvar="RECRUITER_BENCH_BACKLOGS", show_envvar=True,
              help="Queued-job counts of the backlog series, comma-separated (default 1000,10000,100000; "
                   "--quick: 60,200); 'none' skips the series.")
@click.option("--only-backlog", is_flag=True, envvar="RECRUITER_BENCH_ONLY_BACKLOG", show_envvar=True,
              help="Run the backlog series alone (no designs, no worker counts).")
@click.option("--capacity-layout", "layout_spec", default=None, envvar="RECRUITER_BENCH_CAPACITY_LAYOUT",
              show_envvar=True, help="Worker processes x --concurrency of the capacity mode (default 8x25; "
                                     "--quick: 2x3); 'none' skips it.")
@click.option("--recruiter-args", default="", envvar="RECRUITER_BENCH_RECRUITER_ARGS", show_envvar=True,
              help="More options for every `recruiter start` of the run, e.g. '--coalesce 20ms' (a change measured "
                   "beside the default: run twice).")
@click.option("--capacity", "only_capacity", is_flag=True, envvar="RECRUITER_BENCH_CAPACITY", show_envvar=True,
              help="Run the capacity of one leader alone (no designs, no backlog series).")
@click.option("--capacity-baseline-args", "baseline_args", default=None,
              envvar="RECRUITER_BENCH_CAPACITY_BASELINE_ARGS", show_envvar=True,
              help="Also measure the capacity with these `recruiter start` options instead, first, in the same run, "
                   "and print both with their ratio, e.g. '--round-size 84' (before and after side by side).")
@_baseline_code_option("capacity", "baseline_code",
                       "Also measure the capacity with the code of this checkout (e.g. a `git worktree` of an earlier "
                       "commit) first, in the same run, each on a fresh embedded server, and print both with their "
                       "ratio.")
@_baseline_code_option("round-reads", "round_baseline",
                       "With --round-reads: run the series with the code of this checkout (e.g. a `git worktree` of "
                       "an earlier commit) first, in the same run, each series on a fresh embedded server, and print "
                       "both side by side.")
@_baseline_code_option("designs", "designs_baseline",
                       "Also run the first design with the code of this checkout (e.g. a `git worktree` of an earlier "
                       "commit), first, as the design 'baseline', in the same run on the same server: its throughput "
                       "and latency beside this code's (before and after side by side).")
@click.option("--round-reads", "only_round_reads", is_flag=True, envvar="RECRUITER_BENCH_ROUND_READS",
              show_envvar=True, help="Run the round-reads series alone: what a recruiter round reads at several "
                                     "roster sizes with the same job rate.")
@click.option("--round-reads-layouts", "round_layouts_spec", default=None, envvar="RECRUITER_BENCH_ROUND_READS_LAYOUTS",
              show_envvar=True, help="Worker processes x --concurrency of each layout of the round-reads series, "
                                     "comma-separated (default 2x25,8x25,8x100; --quick: 1x2,2x2).")
@click.option("--round-reads-rate", "round_rate", type=click.FloatRange(0.1), default=None,
              envvar="RECRUITER_BENCH_ROUND_READS_RATE", show_envvar=True,
              help="No-op jobs enqueued per second, at a steady pace, in every layout of the round-reads series "
                   "(default 20; --quick: 5).")
@click.option("--peers/--no-peers", "with_peers", default=True, envvar="RECRUITER_BENCH_PEERS", show_envvar=True,
              help="Run the peers (Agenda, and one SIGKILLed worker of each system) and print the peer table.")
@click.option("--aged-server", "aged", is_flag=True, envvar="RECRUITER_BENCH_AGED_SERVER", show_envvar=True,
              help=f"Before the first series on each server the run uses, send it {aging.AGED_WRITES} retryable "
                   "writes, as a server holds after it has run a while (the embedded server keeps each one's reply "
                   "for 30 minutes, up to 10 000, and goes through them all on every retryable write).")
@click.option("--peers-only", is_flag=True, envvar="RECRUITER_BENCH_PEERS_ONLY", show_envvar=True,
              help="Run the recruiter (--prefetch 1) and the peers alone: no other design, capacity or backlog.")
def main(workers_spec: str | None, slots_per_process: int, quick: bool, window_s: float | None, warm_up_s: float | None,
         latency_samples: int | None, designs: str | None, output: Path, publish: bool, no_plot: bool,
         backlogs_spec: str | None, only_backlog: bool, recruiter_args: str, layout_spec: str | None,
         only_capacity: bool, with_peers: bool, peers_only: bool, baseline_args: str | None,
         baseline_code: Path | None, designs_baseline: Path | None, only_round_reads: bool,
         round_layouts_spec: str | None, round_rate: float | None, round_baseline: Path | None,
         aged: bool) -> None:
    """Benchmark the recruiter against the v1 baseline; print tables, write JSON and a PNG."""
    os.environ.pop(STATS_ENVVAR, None)  # the bench counts its own commands on its producer only
    if sum((only_backlog, only_capacity, peers_only, only_round_reads)) > 1:
        raise click.BadParameter("--only-backlog, --capacity, --peers-only and --round-reads each run one part "
                                 "alone: choose one")
    if peers_only:
        designs, layout_spec, backlogs_spec = _peers_only_design(designs), "none", "none"
    if not only_round_reads and (round_layouts_spec or round_rate is not None or round_baseline is not None):
        raise click.BadParameter("--round-reads-layouts, --round-reads-rate and --round-reads-baseline-code go with "
                                 "--round-reads")
    round_plan = _round_reads_plan(quick, round_layouts_spec, round_rate, window_s, warm_up_s) \
        if only_round_reads else None
    if round_plan is not None:
        layout_spec, backlogs_spec = "none", "none"
    sizes = _sizes(quick, window_s, warm_up_s, latency_samples)
    workers = parse_counts(workers_spec or ("1,2" if quick else "1,2,4,8,16"))
    backlog_plan, run_backlog = _backlog_plan(quick, backlogs_spec, only_backlog)
    layout = capacity.parse_layout(layout_spec or "", capacity.QUICK if quick else capacity.FULL) \
        if layout_spec else (capacity.QUICK if quick else capacity.FULL)
    if only_capacity and layout is None:
        raise click.BadParameter("--capacity with --capacity-layout none leaves nothing to run")
    extra = tuple(shlex.split(recruiter_args))
    alone = only_backlog or only_capacity or round_plan is not None
    chosen = [] if alone else _laid_out([replace(d, recruiter_args=(*d.recruiter_args, *extra))
                                         for d in _chosen_designs(designs)], workers, slots_per_process)
    # The first design again, with an earlier checkout's code, run first (--designs-baseline-code).
    baseline = [replace(chosen[0], name="baseline", code=designs_baseline)] if designs_baseline and chosen else []
    output.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    work_dir = output / f"{stamp}-work"
    work_dir.mkdir()
    begun = time.perf_counter()
    ager = aging.Aging(aged, lambda line: click.echo(line, err=True))
    with running_server() as server:
        what = (f"designs {', '.join(d.name for d in chosen)}; workers {','.join(map(str, workers))}" if chosen
                else "capacity only" if only_capacity else "round reads only" if round_plan else "backlog series only")
        click.echo(f"bench: {server.description}; {what}{' (quick)' if quick else ''}", err=True)
        reference_uri = server.database_uri(f"bench_reference_{os.getpid()}")
        reference = {"raw": raw_rates(reference_uri, sizes.raw_ops),
                     "notification": notification_latency(reference_uri, sizes.notify_samples)}
        MongoClient(reference_uri).drop_database(f"bench_reference_{os.getpid()}")
        results = _run_designs(ager.ready(server), [*baseline, *chosen], workers, sizes, work_dir) if chosen else {}
        peers_result = _run_peers(ager.ready(server), chosen, workers, sizes, work_dir, quick, extra) \
            if with_peers and chosen else None
        capacity_result = baseline_result = None
        if layout is not None and not only_backlog:
            if baseline_args is not None or baseline_code is not None:
                with _own_server(server, ager) as own:
                    baseline_result = _run_capacity(own, layout, work_dir, tuple(shlex.split(baseline_args or "")),
                                                    name="capacity-baseline", code=baseline_code or REPO)
                with _own_server(server, ager) as own:
                    capacity_result = _run_capacity(own, layout, work_dir, extra)
            else:
                capacity_result = _run_capacity(ager.ready(server), layout, work_dir, extra)
        run_backlog = run_backlog and not only_capacity
        backlog_result = _run_backlog(ager.ready(server), backlog_plan, work_dir) if run_backlog else None
        round_reads_baseline, round_reads_result = (None, None) if round_plan is None else _run_round_reads(
            server, round_plan, work_dir, extra, round_baseline, ager)
        server_description = server.description
    doc: dict[str, Any] = {
        "meta": {"started_at": stamp, "seconds": time.perf_counter() - begun, "machine": machine(),
                 "server": server_description, "aged_server": aged, "quick": quick, "workers": workers,
                 "designs": [asdict(d) for d in [*baseline, *chosen]], "sizes": asdict(sizes),
                 "settings": {"poll_from": scenario.POLL_FROM, "poll_to": scenario.POLL_TO,
                              "heartbeat_s": scenario.HEARTBEAT_S, "log_level": "warning"},
                 "counted": "command events of the application's clients (PyMongo CommandListener); "
                            "server-monitoring hellos and connection handshakes are not command events"},
        "reference": reference,
        "results": results,
        "capacity": capacity_result,
        "capacity_baseline": baseline_result,
        "backlog": backlog_result,
        "peers": peers_result,
        "round_reads": round_reads_result,
        "round_reads_baseline": round_reads_baseline,
    }
    doc["targets"] = report.targets(doc) if results and not peers_only else []
    _write_and_show(doc, output, stamp, no_plot=no_plot, publish=publish)


def _sizes(quick: bool, window_s: float | None, warm_up_s: float | None, latency_samples: int | None) -> Sizes:
    """The phase sizes: --quick or full, with the window, warm-up and samples given on the command line."""
    sizes = scenario.QUICK if quick else scenario.FULL
    changes: dict[str, Any] = {}
    if window_s is not None:
        changes["window_s"] = window_s
    if warm_up_s is not None:
        changes["warm_up_s"] = warm_up_s
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


def _round_reads_plan(quick: bool, layouts_spec: str | None, rate: float | None, window_s: float | None,
                      warm_up_s: float | None) -> round_reads.Plan:
    """The round-reads series to run: --quick or full, with the layouts, rate, window and warm-up given."""
    plan = round_reads.QUICK if quick else round_reads.FULL
    return round_reads.Plan(round_reads.parse_layouts(layouts_spec) if layouts_spec else plan.layouts,
                            plan.rate if rate is None else rate,
                            plan.warm_up_s if warm_up_s is None else warm_up_s,
                            plan.window_s if window_s is None else window_s)


def _default_design() -> Design:
    """The product with its default look-ahead (the capacity and round-reads modes run it)."""
    return next((d for d in available_designs() if not d.is_v1), Design("recruiter-prefetch0"))


def _chosen_designs(designs: str | None) -> list[Design]:
    """The designs to run: all, or the --designs subset."""
    chosen = available_designs()
    if not designs:  # the observed and batch designs only when asked for (each measured beside the default)
        return [d for d in chosen if d.name not in ("recruiter-observed", "recruiter-batch")]
    if designs:
        names = [d.strip() for d in designs.split(",") if d.strip()]
        unknown = sorted(set(names) - {d.name for d in chosen})
        if unknown:
            raise click.BadParameter(f"unknown design(s) {', '.join(unknown)}; available: "
                                     f"{', '.join(d.name for d in chosen)}", param_hint="--designs")
        chosen = [d for d in chosen if d.name in names]
    return chosen


@contextmanager
def _own_server(server: Server, ager: aging.Aging) -> Iterator[Server]:
    """A fresh embedded server for one of two runs measured side by side (aged like the first with
    ``--aged-server``); ``server`` itself when it is an external MongoDB. On one embedded server the
    second of two capacity runs was 20% slower whichever code ran second (the server keeps what the
    first run left: its records of retryable writes, which it goes through on every one, up to 10 000)."""
    if server.pid is None:
        yield ager.ready(server)
        return
    with running_server() as own:
        yield ager.ready(own)


def _run_round_reads(server: Server, plan: round_reads.Plan, work_dir: Path, extra: tuple[str, ...],
                     baseline: Path | None, ager: aging.Aging) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The round-reads series: the baseline checkout's (if any) and this code's. Side by side, each
    series runs on a fresh server (:func:`_own_server`): the second of two on one embedded server
    ran half the rounds of the first at 800 slots."""
    def run(on: Server, code: Path) -> dict[str, Any]:
        return round_reads.series(on, plan, work_dir, _default_design().worker_args(), extra,
                                  lambda line: click.echo(line, err=True), code=code)

    if baseline is None:
        return None, run(ager.ready(server), REPO)
    with _own_server(server, ager) as own:
        before = run(own, baseline)
    with _own_server(server, ager) as own:
        return before, run(own, REPO)


def _run_capacity(server: Server, layout: capacity.Layout, work_dir: Path,
                  recruiter_args: tuple[str, ...], name: str = "capacity", code: Path = REPO) -> dict[str, Any]:
    """The capacity of one leader, with the product's default look-ahead."""
    default = _default_design()
    click.echo(f"bench: capacity of one leader, {layout.processes} x {layout.concurrency} slots "
               f"({default.name})...", err=True)
    capacity_dir = work_dir / name
    capacity_dir.mkdir()
    try:
        result = capacity.run(server, layout, capacity_dir, default.worker_args(), recruiter_args, code)
    except RuntimeError as exc:
        raise click.ClickException(f"{exc} (process logs in {capacity_dir})") from None
    result["design"] = default.name
    result["recruiter_args"] = list(recruiter_args)
    if code != REPO:
        result["code"] = describe_code(code)
    return result


def _laid_out(designs: list[Design], workers: list[int], slots_per_process: int) -> list[Design]:
    """The designs with their workers run ``slots_per_process`` to a process; every count must
    split (:meth:`Design.processes` says how, and refuses one that does not)."""
    laid = [replace(d, slots_per_process=slots_per_process) for d in designs]
    for design in laid:
        for n in workers:
            try:
                design.processes(n)
            except ValueError as exc:
                raise click.BadParameter(str(exc), param_hint="--slots-per-process") from None
    return laid


def _run_designs(server: Server, chosen: list[Design], workers: list[int], sizes: Sizes,
                 work_dir: Path) -> dict[str, dict[str, Any]]:
    """Every chosen design at every worker count: design -> worker count -> figures."""
    results: dict[str, dict[str, Any]] = {}
    for design in chosen:
        results[design.name] = {}
        for n in workers:
            processes, per = design.processes(n)
            layout = f" ({processes} process(es) x --concurrency {per})" if per > 1 else ""
            click.echo(f"bench: {design.name} with {n} worker(s){layout}...", err=True)
            scenario_dir = work_dir / f"{design.name}-{n}"
            scenario_dir.mkdir()
            try:
                results[design.name][str(n)] = run_scenario(server, design, n, sizes, scenario_dir)
            except RuntimeError as exc:
                raise click.ClickException(f"{exc} (process logs in {scenario_dir})") from None
    return results


def _peers_only_design(designs: str | None) -> str:
    """--peers-only measures the recruiter with its default look-ahead (or the one design named)."""
    if designs and "," in designs:
        raise click.BadParameter("--peers-only runs one design beside the peers", param_hint="--designs")
    return designs or available_designs()[0].name


def _run_peers(server: Server, chosen: list[Design], workers: list[int], sizes: Sizes, work_dir: Path,
               quick: bool, recruiter_args: tuple[str, ...]) -> dict[str, Any]:
    """Agenda at the same worker counts and the SIGKILL test (bench/peers), beside the first design chosen."""
    try:
        result = peers.run(server, workers, sizes, work_dir, recruiter_args=recruiter_args,
                           kill_jobs=peers.KILL_JOBS_QUICK if quick else peers.KILL_JOBS_FULL, quick=quick,
                           say=lambda line: click.echo(line, err=True))
    except RuntimeError as exc:
        raise click.ClickException(f"{exc} (process logs in {work_dir / 'peers'})") from None
    result["design"] = chosen[0].name
    return result


def _run_backlog(server: Server, backlog_plan: backlog.BacklogSizes, work_dir: Path) -> dict[str, Any]:
    """The backlog series (bench/backlog.py)."""
    backlog_dir = work_dir / "backlog"
    backlog_dir.mkdir()
    try:
        return backlog.series(server.database_uri, backlog_plan, backlog_dir,
                              lambda line: click.echo(line, err=True))
    except RuntimeError as exc:
        raise click.ClickException(f"{exc} (process logs in {backlog_dir})") from None


def _show_capacity(doc: dict[str, Any]) -> None:
    """The capacity tables: the baseline's (if measured), the run's, and both side by side."""
    before, after = doc.get("capacity_baseline"), doc["capacity"]
    for c in (before, after):
        if c is not None:
            click.echo(capacity.table(c))
    if before is not None and after is not None:
        click.echo(capacity.comparison(before, after))


def _show_round_reads(doc: dict[str, Any]) -> None:
    """The round-reads tables: the baseline's (if measured), the run's, and both side by side."""
    before, after = doc.get("round_reads_baseline"), doc.get("round_reads")
    for r in (before, after):
        if r:
            click.echo(round_reads.table(r))
    if before and after:
        click.echo(round_reads.comparison(before, after))


def _write_and_show(doc: dict[str, Any], output: Path, stamp: str, *, no_plot: bool, publish: bool) -> None:
    """Write the JSON (stamped and latest.json; docs/bench.json when publishing), print the tables,
    draw the plot."""
    results, backlog_result = doc["results"], doc["backlog"]
    text = json.dumps(doc, indent=1, default=str)
    (output / f"{stamp}.json").write_text(text)
    (output / "latest.json").write_text(text)
    if results:
        click.echo(report.table(doc))
        if doc["targets"]:
            click.echo(report.target_table(doc["targets"]))
    if doc.get("peers"):
        click.echo(peers.table(doc, doc["peers"]["design"]))
    _show_capacity(doc)
    if backlog_result is not None:
        click.echo(backlog.table(backlog_result))
    _show_round_reads(doc)
    png = None
    if not no_plot and results:
        png = report.plot(doc, output / f"{stamp}.png")
        click.echo(f"bench: plot {png}", err=True)
    if publish:
        (DOCS / "bench.json").write_text(text)
        if png is not None:
            shutil.copyfile(png, DOCS / "bench.png")
        click.echo(f"bench: published {DOCS / 'bench.json'}{' and bench.png' if png else ''}", err=True)
    click.echo(f"bench: results {output / f'{stamp}.json'} (also latest.json), "
               f"{doc['meta']['seconds']:.0f}s", err=True)


if __name__ == "__main__":
    main()
