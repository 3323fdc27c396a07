"""``recruiter start``, ``worker start`` and ``cleaner start``: the three processes.

Invariant: a command only turns its options into a frozen config (a bad value is
a usage error, exit 2) and hands the process to :mod:`recruiter.processes.runtime`;
what goes wrong while connecting or running is shown as one line (exit 1), with
the traceback only at ``--log-level debug``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import click

from recruiter.cli.metrics import metrics_options
from recruiter.cli.options import (
    CONTEXT,
    DURATION,
    DURATION_OR_ZERO,
    SCHEME,
    SIZE,
    VERSION_MESSAGE,
    Command,
    Common,
    common_options,
    connect_target,
    connection_error,
    env,
    format_seconds,
    seconds,
    valid,
)
from recruiter.domain.batching import MAX_BATCH
from recruiter.domain.lanes import MAX_PREFETCH
from recruiter.domain.naming import module_problem, modules_under
from recruiter.domain.selection import CountingScheme
from recruiter.domain.versions import RELEASE
from recruiter.processes import logs, runtime
from recruiter.processes.cleaner import CleanerConfig, CleanerProcess
from recruiter.processes.metrics import MetricsConfig
from recruiter.processes.recruiter import RecruiterConfig, RecruiterProcess
from recruiter.processes.releases import refuse_leaders
from recruiter.processes.runtime import Check, Instruments, Process
from recruiter.processes.worker.config import ISOLATIONS
from recruiter.processes.worker.runtime import WorkerConfig, WorkerIdTaken, WorkerProcess
from recruiter.store import (
    AsyncDb,
    Collections,
    ConnectionProblem,
    ServerClock,
    StoreError,
    Target,
    Wake,
    describe,
    heartbeat_client,
    longest_heartbeat_interval,
    parse_target,
    sync_db,
)

MakeObserved = Callable[[AsyncDb, ServerClock, Instruments], Process]


def subscriber_option(fn: Command) -> Command:
    """``--subscriber MODULE:CALLABLE`` (repeatable): a function called with each event of the process."""
    return click.option("--subscriber", "subscribers", envvar=env("SUBSCRIBER"), multiple=True, show_envvar=True,
                        metavar="MODULE:CALLABLE",
                        help="Call this function with each event of the process (job finished, archived, lease "
                             "won...; see docs/operations/read-model-and-events.md); repeat for several.")(fn)


def run_process(common: Common, app_name: str, make: MakeObserved, check: Check | None = None,
                subscribers: tuple[str, ...] = (), metrics: MetricsConfig | None = None) -> None:
    """Connect, build the process with ``make(db, clock, instruments)`` and run it until a signal stops it.

    ``check(db)``, if given, runs first and may refuse to start (click.UsageError); a
    subscriber that cannot be loaded is a usage error."""
    logs.configure(common.log_level, common.log_format)
    instruments = valid(lambda: runtime.Instruments.build(subscribers, metrics))
    target: Target | None = None
    try:
        target = connect_target(common)
        code = runtime.run(target, app_name, lambda db, clock: make(db, clock, instruments), check,
                           listeners=instruments.command_listeners, metrics=instruments.metrics)
    except ConnectionProblem as exc:
        if common.debug:
            raise
        raise connection_error(exc) from None
    except (WorkerIdTaken, ValueError) as exc:
        if common.debug:
            raise
        raise click.ClickException(str(exc)) from None
    except StoreError as exc:
        if common.debug or target is None:
            raise
        raise click.ClickException(describe(exc, target)) from None
    if code:
        sys.exit(code)


@click.command("start")
@common_options
@click.option("--backoff-from", envvar=env("BACKOFF_FROM"), type=DURATION, default="50ms", show_default=True,
              show_envvar=True, help="First idle wait between rounds.")
@click.option("--backoff-to", envvar=env("BACKOFF_TO"), type=DURATION, default="1s", show_default=True,
              show_envvar=True, help="Longest idle wait between rounds.")
@click.option("--round-size", envvar=env("ROUND_SIZE"), type=click.IntRange(1, 1000), default=42,
              show_default=True, show_envvar=True, help="Most workers assigned in one round.")
@click.option("--lease-ttl", envvar=env("LEASE_TTL"), type=DURATION, default="10s", show_default=True,
              show_envvar=True, help="Leader lease (at most 1d); a standby takes over this long after the leader dies.")
@click.option("--counting-scheme", envvar=env("COUNTING_SCHEME"), type=SCHEME, default="4,1", show_default=True,
              show_envvar=True, help="Within a tenant: this many high-priority jobs, then this many low, again.")
@click.option("--sweep-interval", envvar=env("SWEEP_INTERVAL"), type=DURATION, default="60s", show_default=True,
              show_envvar=True, help="How often the leader looks for malformed jobs that no round reads "
                                     "(at least 20 times as long as a look takes).")
@click.option("--coalesce", envvar=env("COALESCE"), type=DURATION_OR_ZERO, default="0s", show_default=True,
              show_envvar=True, help="Least time between the starts of two rounds woken by outcomes, so that one "
                                     "round serves the outcomes of many workers (enqueues are not delayed).")
@subscriber_option
@metrics_options("recruiter")
def start_recruiter(backoff_from: timedelta, backoff_to: timedelta, round_size: int, lease_ttl: timedelta,
                    counting_scheme: CountingScheme, sweep_interval: timedelta, coalesce: timedelta,
                    subscribers: tuple[str, ...], metrics: MetricsConfig | None, common: Common) -> None:
    """Run the recruiter (one leads; others stand by)."""
    config = valid(lambda: RecruiterConfig(round_size=round_size, backoff_from_s=seconds(backoff_from),
                                            backoff_to_s=seconds(backoff_to), lease_ttl_s=seconds(lease_ttl),
                                            counting_scheme=counting_scheme,
                                            sweep_interval_s=seconds(sweep_interval),
                                            coalesce_s=seconds(coalesce)))
    run_process(common, "recruiter", lambda db, clock, i: RecruiterProcess(db, clock, config, bus=i.bus),
                subscribers=subscribers, metrics=metrics)


@click.group("worker", context_settings=CONTEXT)
@click.version_option(RELEASE, message=VERSION_MESSAGE)
def worker_group() -> None:
    """Workers: run the jobs."""


@worker_group.command("start")
@common_options
@click.option("--group", "groups", envvar=env("GROUP"), multiple=True, default=("*",), show_default=True,
              show_envvar=True, help="Group to work on; repeat for several; '*' takes any group.")
@click.option("--concurrency", envvar=env("CONCURRENCY"), type=click.IntRange(1, 1024), default=1,
              show_default=True, show_envvar=True, help="Workers in this process, each with its own roster entry.")
@click.option("--prefetch", envvar=env("PREFETCH"), type=click.IntRange(0, MAX_PREFETCH), default=1,
              show_default=True, show_envvar=True,
              help="Jobs each worker may hold besides the one it runs, so it starts the next one as soon as it "
                   "records an outcome; 0 takes one job at a time. A held job that never started goes back "
                   "without counting an attempt if the worker dies or stops, or the job is cancelled.")
@click.option("--batch", envvar=env("BATCH"), type=click.IntRange(0, MAX_BATCH), default=0,
              show_default=True, show_envvar=True,
              help="Jobs each worker may take ahead in one assignment while its jobs are short (sized by the "
                   "recruiter to about a round's work from their measured run time; long jobs get --prefetch "
                   "only); its outcomes are written together. 0: off. Held jobs go back as with --prefetch.")
@click.option("--id", "worker_id", envvar=env("WORKER_ID"), default=None, show_envvar=True,
              help="Worker id (default: a new ObjectId); with --concurrency N, ids are ID-0..ID-N-1.")
@click.option("--heartbeat-interval", envvar=env("HEARTBEAT_INTERVAL"), type=DURATION, default="5s",
              show_default=True, show_envvar=True, help="How often last_seen_at is refreshed.")
@click.option("--poll-from", envvar=env("POLL_FROM"), type=DURATION, default="20ms", show_default=True,
              show_envvar=True, help="Shortest wait between the process's reads of its roster entries, while work is "
                                     "expected (after an outcome, until a turnaround is learnt; the wait "
                                     "the backoff doubles from; a hot entry is read every 50 ms or this).")
@click.option("--poll-to", envvar=env("POLL_TO"), type=DURATION, default="500ms", show_default=True,
              show_envvar=True, help="Longest wait between those reads while idle: an idle worker process costs "
                                     "the server one read per --poll-to, however many slots it runs.")
@click.option("--max-crashes", envvar=env("MAX_CRASHES"), type=click.IntRange(1), default=3, show_default=True,
              show_envvar=True, help="A job whose workers died this many times is archived as crashed-too-many-times.")
@click.option("--wake", envvar=env("WAKE"), type=click.Choice([w.value for w in Wake]), default=Wake.AUTO.value,
              show_default=True, show_envvar=True,
              help="How a worker learns of its job: auto or poll (the same): one read of all the process's "
                   "roster entries, paced by --poll-from/--poll-to; change-stream: one change stream per process "
                   "(worth it only with few worker processes on a server with few writes: every waiting stream "
                   "reads every write of the deployment).")
@click.option("--import-path", envvar=env("IMPORT_PATH"), multiple=True, default=(".",), show_default=True,
              show_envvar=True, help="Directory added to sys.path so job classes can be imported.")
@click.option("--preload", envvar=env("PRELOAD"), multiple=True, show_envvar=True,
              help="Module to import at start, so a typo fails now rather than in every job.")
@click.option("--allow-module", "allow_modules", envvar=env("ALLOW_MODULE"), multiple=True, show_envvar=True,
              metavar="PREFIX", help="Module (and its submodules) jobs may name, besides those under --import-path "
                                     "and --preload; others are given back for another worker without being imported "
                                     "(see --give-back-for).")
@click.option("--grace-period", envvar=env("GRACE_PERIOD"), type=DURATION, default="30s", show_default=True,
              show_envvar=True, help="After SIGTERM, how long running jobs may take before they are interrupted.")
@click.option("--memory-limit", envvar=env("MEMORY_LIMIT"), type=SIZE, default=None, show_envvar=True,
              help="After a job, a worker over this resident size (e.g. 512MB) exits with status 75 and a "
                   "supervisor process starts a fresh one.")
@click.option("--isolation", envvar=env("ISOLATION"), type=click.Choice(list(ISOLATIONS)), default="thread",
              show_default=True, show_envvar=True,
              help="Where a job without a timeout runs: a thread of the worker (cheapest; a cancel cannot stop "
                   "it, only discard its outcome), or a child process for every job (killed on cancel, timeout or "
                   "forced stop; its memory goes with it; about a few ms more per job).")
@click.option("--give-back-for", envvar=env("GIVE_BACK_FOR"), type=DURATION, default="1h", show_default=True,
              show_envvar=True,
              help="A job whose classes this worker cannot import, or may not (--allow-module), goes back "
                   "unattempted for another worker (a rolling deploy); once refused for this long it is archived "
                   "as unrunnable.")
@click.option("--max-result-size", envvar=env("MAX_RESULT_SIZE"), type=SIZE, default="1MiB", show_default=True,
              show_envvar=True,
              help="Largest job result kept (BSON size, up to 8MiB); a bigger one, or one BSON cannot hold, is "
                   "archived as result_dropped and wait() raises ResultDropped.")
@click.option("--burst", envvar=env("BURST"), is_flag=True, default=False, show_envvar=True,
              help="Exit (status 0) once nothing is left for this worker: no job of its groups due now and none "
                   "assigned to it. Jobs due later are not waited for.")
@subscriber_option
@metrics_options("worker", tenant_labels=True)
def start_worker(groups: tuple[str, ...], concurrency: int, prefetch: int, batch: int, worker_id: str | None,
                 heartbeat_interval: timedelta,
                 poll_from: timedelta, poll_to: timedelta, max_crashes: int, wake: str, import_path: tuple[str, ...],
                 preload: tuple[str, ...], allow_modules: tuple[str, ...], grace_period: timedelta,
                 memory_limit: int | None, isolation: str, give_back_for: timedelta, max_result_size: int,
                 burst: bool,
                 subscribers: tuple[str, ...], metrics: MetricsConfig | None,
                 common: Common) -> None:
    """Run workers for the given groups.

    Jobs may name only modules found under --import-path, those named by
    --preload and those under an --allow-module prefix; a job naming any other
    is given back for another worker, and its module is never imported.
    """
    for p in reversed(import_path):
        sys.path.insert(0, str(Path(p).resolve()))
    allowed = allowed_modules(import_path, preload, allow_modules)
    for module in preload:
        try:
            __import__(module)
        except Exception as exc:  # noqa: BLE001 - reported as one line
            raise click.ClickException(f"cannot preload {module!r}: {type(exc).__name__}: {exc}") from None
    groups = tuple(dict.fromkeys(g for spec in groups for g in spec.split(",") if g))
    config = valid(lambda: WorkerConfig(
        groups=groups, concurrency=concurrency, prefetch=prefetch, batch=batch, worker_id=worker_id,
        heartbeat_interval_s=seconds(heartbeat_interval), poll_from_s=seconds(poll_from),
        poll_to_s=seconds(poll_to), max_crashes=max_crashes, wake=Wake(wake), grace_period_s=seconds(grace_period),
        memory_limit_bytes=memory_limit, allowed_modules=allowed, burst=burst,
        give_back_for_s=seconds(give_back_for), isolation=isolation, max_result_bytes=max_result_size))
    if runtime.needs_supervisor(memory_limit):
        sys.exit(runtime.supervised(run_worker, common, config, subscribers, metrics))
    run_worker(common, config, subscribers, metrics)


def allowed_modules(import_path: tuple[str, ...], preload: tuple[str, ...],
                    allow_modules: tuple[str, ...]) -> tuple[str, ...]:
    """The worker's allow-list: what the import path provides, the preloaded modules and --allow-module."""
    for prefix in (*preload, *allow_modules):
        problem = module_problem(prefix)
        if problem:
            raise click.UsageError(f"--preload or --allow-module: {problem}")
    found = [m for p in import_path for m in modules_under(Path(p).resolve())]
    return tuple(dict.fromkeys([*found, *preload, *allow_modules]))


def run_worker(common: Common, config: WorkerConfig, subscribers: tuple[str, ...] = (),
               metrics: MetricsConfig | None = None) -> None:
    """Run the worker process itself (in the supervisor's child, with --memory-limit)."""

    def make(db: AsyncDb, clock: ServerClock, instruments: runtime.Instruments) -> WorkerProcess:
        # The heartbeat thread has a client of its own, so a blocked event loop cannot hold it up.
        target = parse_target(common.target, common.prefix)
        beats = heartbeat_client(target, app_name="recruiter-heartbeat",
                                 event_listeners=list(instruments.command_listeners))
        return WorkerProcess(db, clock, config, heartbeat_db=sync_db(beats, target), bus=instruments.bus)

    # A leader of a release this one does not work beside: refused in one line (recruiter.processes.releases).
    run_process(common, "recruiter-worker", make, check=refuse_leaders, subscribers=subscribers, metrics=metrics)


@click.group("cleaner", context_settings=CONTEXT)
@click.version_option(RELEASE, message=VERSION_MESSAGE)
def cleaner_group() -> None:
    """The cleaner: dead workers and old history."""


@cleaner_group.command("start")
@common_options
@click.option("--considered-dead-after", envvar=env("CONSIDERED_DEAD_AFTER"), type=DURATION, default="30s",
              show_default=True, show_envvar=True,
              help="A worker silent this long is dead (missed heartbeats); at least twice the heartbeat interval.")
@click.option("--heartbeat-interval", envvar=env("HEARTBEAT_INTERVAL"), type=DURATION, default=None,
              show_envvar=True,
              help="Optional: the workers' heartbeat interval, to check --considered-dead-after against it. "
                   "Without it the cleaner checks the intervals the workers registered in the roster, and it "
                   "always judges each worker by at least twice its own registered interval.")
@click.option("--clean-after", envvar=env("CLEAN_AFTER"), type=DURATION, default="7d", show_default=True,
              show_envvar=True, help="Archived jobs older than this are deleted.")
@click.option("--interval", envvar=env("CLEANER_INTERVAL"), type=DURATION, default="2s", show_default=True,
              show_envvar=True, help="Time between cleaning passes.")
@click.option("--lease-ttl", envvar=env("LEASE_TTL"), type=DURATION, default="10s", show_default=True,
              show_envvar=True, help="Cleaner lease (at most 1d); a standby takes over this long after it dies.")
@subscriber_option
@metrics_options("cleaner")
def start_cleaner(considered_dead_after: timedelta, heartbeat_interval: timedelta | None, clean_after: timedelta,
                  interval: timedelta, lease_ttl: timedelta, subscribers: tuple[str, ...],
                  metrics: MetricsConfig | None, common: Common) -> None:
    """Run the cleaner (one active; others stand by)."""
    config = valid(lambda: CleanerConfig(
        considered_dead_after_s=seconds(considered_dead_after), clean_after_s=seconds(clean_after),
        interval_s=seconds(interval), lease_ttl_s=seconds(lease_ttl)))
    dead_after_s = config.considered_dead_after_s
    if heartbeat_interval is not None:
        _check_dead_after(dead_after_s, seconds(heartbeat_interval), "--heartbeat-interval")

    async def check_roster(db: AsyncDb) -> None:
        """Workers already registered with a longer interval count too (refused the same way)."""
        longest = await longest_heartbeat_interval(Collections.of(db).roster, dead_after_s / 2)
        if longest is not None:
            worker_id, interval_s = longest
            _check_dead_after(dead_after_s, interval_s, f"the heartbeat interval of worker {worker_id!r}")

    run_process(common, "recruiter-cleaner", lambda db, clock, i: CleanerProcess(db, clock, config, bus=i.bus),
                check=check_roster, subscribers=subscribers, metrics=metrics)


def _check_dead_after(dead_after_s: float, heartbeat_s: float, source: str) -> None:
    """``--considered-dead-after`` must leave room for one missed heartbeat: at least twice the interval."""
    if dead_after_s < 2 * heartbeat_s:
        raise click.UsageError(
            f"--considered-dead-after {format_seconds(dead_after_s)} is shorter than twice {source} "
            f"({format_seconds(heartbeat_s)}): a live worker would be taken for dead between two heartbeats; "
            f"use at least {format_seconds(2 * heartbeat_s)}")


