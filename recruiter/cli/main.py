"""Command line: ``recruiter start``, ``worker start``, ``cleaner start`` and friends.

Commands are thin: they parse and validate options into frozen configs, set up
logging, connect, and run the process objects. Every option can also be given
as an environment variable (shown in ``--help``); the MongoDB URI comes from
``--target``, ``RECRUITER_MONGODB_URI`` or ``MONGODB_URI``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import click
import pymongo
import structlog
from pymongo.errors import PyMongoError

from recruiter.domain import control
from recruiter.domain.durations import parse_duration
from recruiter.domain.naming import module_problem, modules_under, name_problem
from recruiter.domain.selection import CountingScheme
from recruiter.domain.sizes import parse_size
from recruiter.processes import embedded, logs
from recruiter.processes.cleaner import CleanerConfig, CleanerProcess
from recruiter.processes.recruiter import RecruiterConfig, RecruiterProcess
from recruiter.processes.worker.runtime import WorkerConfig, WorkerIdTaken, WorkerProcess
from recruiter.store import read_paused, switch_paused, unused_names
from recruiter.store.clock import ServerClock
from recruiter.store.connection import (
    DEFAULT_URI,
    URI_ENVVARS,
    ConnectionProblem,
    Target,
    async_client,
    describe,
    parse_target,
    sync_client,
    wait_until_reachable,
)
from recruiter.store.indexes import ensure_indexes, ensure_indexes_sync
from recruiter.store.layout import SyncCollections
from recruiter.store.wakeup import Wake

log = structlog.get_logger("recruiter.cli")

RECALIBRATE_CLOCK_S = 60.0


class Duration(click.ParamType):  # type: ignore[type-arg]
    """A duration such as ``200ms``, ``30s``, ``5m``, ``2h`` or ``5d``."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> timedelta:
        if isinstance(value, timedelta):
            return value
        try:
            td = parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if td <= timedelta():
            self.fail(f"{value!r} must be longer than zero", param, ctx)
        return td


DURATION = Duration()


class Size(click.ParamType):  # type: ignore[type-arg]
    """A memory size such as ``512MB`` or ``2G`` (powers of 1024)."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_size(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class Scheme(click.ParamType):  # type: ignore[type-arg]
    """A counting scheme ``HIGH,LOW`` such as ``4,1``."""

    name = "high,low"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> CountingScheme:
        if isinstance(value, CountingScheme):
            return value
        try:
            return CountingScheme.parse(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


SIZE = Size()
SCHEME = Scheme()


def env(name: str) -> str:
    return f"RECRUITER_{name}"


CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def target_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--target", envvar=list(URI_ENVVARS), default=DEFAULT_URI, show_default=True,
                        show_envvar=True, help="MongoDB URI; the database defaults to 'recruiter'.")(fn)


def common_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        target_option,
        click.option("--embedded/--no-embedded", envvar=env("EMBEDDED"), default=False, show_envvar=True,
                     help="If nothing answers at a localhost target, start the embedded server there."),
        click.option("--embedded-path", envvar=env("EMBEDDED_PATH"), type=click.Path(path_type=Path),
                     default=embedded.DEFAULT_STORAGE, show_default=True, show_envvar=True,
                     help="Storage directory of the embedded server."),
        click.option("--log-level", envvar=env("LOG_LEVEL"), type=click.Choice(logs.LEVELS), default="info",
                     show_default=True, show_envvar=True, help="debug also shows tracebacks."),
        click.option("--log-format", envvar=env("LOG_FORMAT"), type=click.Choice(logs.FORMATS), default="auto",
                     show_default=True, show_envvar=True, help="auto: console on a terminal, JSON otherwise."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def connect_target(target_uri: str, use_embedded: bool, embedded_path: Path) -> Target:
    if use_embedded:
        return embedded.ensure_running(target_uri, embedded_path)
    target = parse_target(target_uri)
    wait_until_reachable(target, timeout_s=5.0)
    return target


def run_process(opts: dict[str, Any], app_name: str, make: Callable[[Any, ServerClock], Any], *,
                check: Callable[[Any], Awaitable[None]] | None = None) -> None:
    """Connect, build the process with ``make(db, clock)`` and run it until a signal stops it.

    ``check(db)``, if given, runs first and may refuse to start (click.UsageError)."""
    logs.configure(opts["log_level"], opts["log_format"])
    debug = opts["log_level"] == "debug"
    target: Target | None = None
    try:
        target = connect_target(opts["target"], opts["embedded"], opts["embedded_path"])
        code = asyncio.run(_main(target, app_name, make, check))
    except (ConnectionProblem, WorkerIdTaken, ValueError) as exc:
        if debug:
            raise
        raise click.ClickException(str(exc)) from None
    except PyMongoError as exc:
        if debug or target is None:
            raise
        raise click.ClickException(describe(exc, target)) from None
    if code:
        sys.exit(code)


async def _main(target: Target, app_name: str, make: Callable[[Any, ServerClock], Any],
                check: Callable[[Any], Awaitable[None]] | None) -> int:
    """Run the process; returns its exit status (non-zero e.g. for a worker over its memory limit)."""
    client = async_client(target, app_name=app_name)
    try:
        clock = ServerClock()
        await clock.calibrate(client)
        db = client[target.database]
        await ensure_indexes(db)
        if check is not None:
            await check(db)
        process = make(db, clock)
        main = asyncio.current_task()
        assert main is not None
        signals = {"count": 0}

        watchdog: list[asyncio.Task[None]] = []

        def on_signal(signum: int) -> None:
            signals["count"] += 1
            if signals["count"] == 1:
                log.info("signal.received", signal=signal.Signals(signum).name, action="graceful stop")
                process.stop()
                watchdog.append(asyncio.create_task(_exit_without_server(client, process, target),
                                                    name="stop.watchdog"))
            else:
                log.warning("signal.received", signal=signal.Signals(signum).name, action="forced stop")
                force = getattr(process, "force", None)
                if force is not None:
                    force()  # the process interrupts its work and gives it back
                else:
                    main.cancel()

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal, sig)
        # SIGUSR1 prints what every task is waiting on (py-spy cannot see coroutines).
        loop.add_signal_handler(signal.SIGUSR1, _dump_tasks)
        calibrator = asyncio.create_task(_recalibrate(clock, client), name="clock.calibrate")
        try:
            await process.run()
        except asyncio.CancelledError:
            log.warning("process.forced_stop")
        finally:
            calibrator.cancel()
            for task in watchdog:
                task.cancel()
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
                loop.remove_signal_handler(sig)
        return int(getattr(process, "exit_code", 0))
    finally:
        await client.close()


STOP_PROBE_S = 1.0


async def _exit_without_server(client: Any, process: Any, target: Target) -> None:
    """After a stop request, end the process at once if its server is gone and it holds no job.

    Nothing it could still write (deregistering, releasing its lease) can reach the
    server, and every operation would first wait out its server selection timeout
    (10 s or more each). What it leaves behind is what a crash leaves, and is
    handled the same way: the cleaner removes its roster entry, a lease expires.
    A worker running a job waits for it first, as any graceful stop does.
    """
    await asyncio.sleep(STOP_PROBE_S)  # with a server, the stop ends in this time
    while True:
        if not getattr(process, "busy", lambda: False)() and not await _answers_ping(client):
            log.warning("process.exit_without_server", server=target.display,
                        detail="the server does not answer: leaving now without deregistering or releasing "
                               "leases; the cleaner removes this process's roster entries, and leases expire")
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        await asyncio.sleep(STOP_PROBE_S)


async def _answers_ping(client: Any) -> bool:
    try:
        with pymongo.timeout(STOP_PROBE_S):
            await client.admin.command("ping")
    except PyMongoError:
        return False
    return True


def _dump_tasks() -> None:
    for task in asyncio.all_tasks():
        print(f"--- task {task.get_name()}", file=sys.stderr)
        task.print_stack(file=sys.stderr)
    sys.stderr.flush()


async def _recalibrate(clock: ServerClock, client: Any) -> None:
    while True:
        await asyncio.sleep(RECALIBRATE_CLOCK_S)
        with contextlib.suppress(PyMongoError):
            await clock.calibrate(client)


def seconds(td: timedelta) -> float:
    return td.total_seconds()


# -- commands ------------------------------------------------------------------------------


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="recruiter")
def main() -> None:
    """recruiter: a job queue on MongoDB with one central recruiter."""


@main.command("start")
@common_options
@click.option("--backoff-from", envvar=env("BACKOFF_FROM"), type=DURATION, default="50ms", show_default=True,
              show_envvar=True, help="First idle wait between rounds.")
@click.option("--backoff-to", envvar=env("BACKOFF_TO"), type=DURATION, default="1s", show_default=True,
              show_envvar=True, help="Longest idle wait between rounds.")
@click.option("--round-size", envvar=env("ROUND_SIZE"), type=click.IntRange(1, 1000), default=42,
              show_default=True, show_envvar=True, help="Most workers assigned in one round.")
@click.option("--lease-ttl", envvar=env("LEASE_TTL"), type=DURATION, default="10s", show_default=True,
              show_envvar=True, help="Leader lease; a standby takes over this long after the leader dies.")
@click.option("--counting-scheme", envvar=env("COUNTING_SCHEME"), type=SCHEME, default="4,1", show_default=True,
              show_envvar=True, help="Within a tenant: this many high-priority jobs, then this many low, again.")
@click.option("--sweep-interval", envvar=env("SWEEP_INTERVAL"), type=DURATION, default="60s", show_default=True,
              show_envvar=True, help="How often the leader looks for malformed jobs that no round reads "
                                     "(at least 20 times as long as a look takes).")
def start_recruiter(backoff_from: timedelta, backoff_to: timedelta, round_size: int, lease_ttl: timedelta,
                    counting_scheme: CountingScheme, sweep_interval: timedelta, **opts: Any) -> None:
    """Run the recruiter (one leads; others stand by)."""
    config = _valid(lambda: RecruiterConfig(round_size=round_size, backoff_from_s=seconds(backoff_from),
                                            backoff_to_s=seconds(backoff_to), lease_ttl_s=seconds(lease_ttl),
                                            counting_scheme=counting_scheme,
                                            sweep_interval_s=seconds(sweep_interval)))
    run_process(opts, "recruiter", lambda db, clock: RecruiterProcess(db, clock, config))


@main.group("worker", context_settings=CONTEXT)
def worker_group() -> None:
    """Workers: run the jobs."""


@worker_group.command("start")
@common_options
@click.option("--group", "groups", envvar=env("GROUP"), multiple=True, default=("*",), show_default=True,
              show_envvar=True, help="Group to work on; repeat for several; '*' takes any group.")
@click.option("--concurrency", envvar=env("CONCURRENCY"), type=click.IntRange(1, 1024), default=1,
              show_default=True, show_envvar=True, help="Workers in this process, each with its own roster entry.")
@click.option("--id", "worker_id", envvar=env("WORKER_ID"), default=None, show_envvar=True,
              help="Worker id (default: a new ObjectId); with --concurrency N, ids are ID-0..ID-N-1.")
@click.option("--heartbeat-interval", envvar=env("HEARTBEAT_INTERVAL"), type=DURATION, default="5s",
              show_default=True, show_envvar=True, help="How often last_seen_at is refreshed.")
@click.option("--poll-from", envvar=env("POLL_FROM"), type=DURATION, default="20ms", show_default=True,
              show_envvar=True, help="First idle wait between reads of the roster entry.")
@click.option("--poll-to", envvar=env("POLL_TO"), type=DURATION, default="500ms", show_default=True,
              show_envvar=True, help="Longest idle wait between reads of the roster entry.")
@click.option("--max-crashes", envvar=env("MAX_CRASHES"), type=click.IntRange(1), default=3, show_default=True,
              show_envvar=True, help="A job whose workers died this many times is archived as crashed-too-many-times.")
@click.option("--wake", envvar=env("WAKE"), type=click.Choice([w.value for w in Wake]), default=Wake.AUTO.value,
              show_default=True, show_envvar=True,
              help="How a worker learns of its job: a change stream on its roster entry, polling it "
                   "(--poll-from/--poll-to), or auto (a stream where the server has them).")
@click.option("--import-path", envvar=env("IMPORT_PATH"), multiple=True, default=(".",), show_default=True,
              show_envvar=True, help="Directory added to sys.path so job classes can be imported.")
@click.option("--preload", envvar=env("PRELOAD"), multiple=True, show_envvar=True,
              help="Module to import at start, so a typo fails now rather than in every job.")
@click.option("--allow-module", "allow_modules", envvar=env("ALLOW_MODULE"), multiple=True, show_envvar=True,
              metavar="PREFIX", help="Module (and its submodules) jobs may name, besides those under --import-path "
                                     "and --preload; others are archived as malformed without being imported.")
@click.option("--grace-period", envvar=env("GRACE_PERIOD"), type=DURATION, default="30s", show_default=True,
              show_envvar=True, help="After SIGTERM, how long running jobs may take before they are interrupted.")
@click.option("--memory-limit", envvar=env("MEMORY_LIMIT"), type=SIZE, default=None, show_envvar=True,
              help="After a job, a worker over this resident size (e.g. 512MB) exits with status 75 and a "
                   "supervisor process starts a fresh one.")
def start_worker(groups: tuple[str, ...], concurrency: int, worker_id: str | None, heartbeat_interval: timedelta,
                 poll_from: timedelta, poll_to: timedelta, max_crashes: int, wake: str, import_path: tuple[str, ...],
                 preload: tuple[str, ...], allow_modules: tuple[str, ...], grace_period: timedelta,
                 memory_limit: int | None, **opts: Any) -> None:
    """Run workers for the given groups.

    Jobs may name only modules found under --import-path, those named by
    --preload and those under an --allow-module prefix; a job naming any other
    is archived as malformed, and its module is never imported.
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
    config = _valid(lambda: WorkerConfig(
        groups=groups, concurrency=concurrency, worker_id=worker_id,
        heartbeat_interval_s=seconds(heartbeat_interval), poll_from_s=seconds(poll_from),
        poll_to_s=seconds(poll_to), max_crashes=max_crashes, wake=Wake(wake), grace_period_s=seconds(grace_period),
        memory_limit_bytes=memory_limit, allowed_modules=allowed))
    if memory_limit is not None and not os.environ.get(SUPERVISED):
        from recruiter.processes.worker.supervisor import supervise

        sys.exit(supervise(_run_worker, opts, config, child_env=SUPERVISED))
    _run_worker(opts, config)


SUPERVISED = "RECRUITER_SUPERVISED_WORKER"


def allowed_modules(import_path: tuple[str, ...], preload: tuple[str, ...],
                    allow_modules: tuple[str, ...]) -> tuple[str, ...]:
    """The worker's allow-list: what the import path provides, the preloaded modules and --allow-module."""
    for prefix in (*preload, *allow_modules):
        problem = module_problem(prefix)
        if problem:
            raise click.UsageError(f"--preload or --allow-module: {problem}")
    found = [m for p in import_path for m in modules_under(Path(p).resolve())]
    return tuple(dict.fromkeys([*found, *preload, *allow_modules]))



def _run_worker(opts: dict[str, Any], config: WorkerConfig) -> None:
    def make(db: Any, clock: ServerClock) -> WorkerProcess:
        # The heartbeat thread has a client of its own, so a blocked event loop cannot hold it up.
        heartbeat_client = sync_client(parse_target(opts["target"]), app_name="recruiter-heartbeat")
        return WorkerProcess(db, clock, config, heartbeat_db=heartbeat_client[db.name])

    run_process(opts, "recruiter-worker", make)


@main.group("cleaner", context_settings=CONTEXT)
def cleaner_group() -> None:
    """The cleaner: dead workers and old history."""


@cleaner_group.command("start")
@common_options
@click.option("--considered-dead-after", envvar=env("CONSIDERED_DEAD_AFTER"), type=DURATION, default="30s",
              show_default=True, show_envvar=True,
              help="A worker silent this long is dead (missed heartbeats); at least twice the heartbeat interval.")
@click.option("--heartbeat-interval", envvar=env("HEARTBEAT_INTERVAL"), type=DURATION, default="5s",
              show_default=True, show_envvar=True,
              help="The workers' heartbeat interval (the worker's default); longer ones registered in the "
                   "roster count too.")
@click.option("--clean-after", envvar=env("CLEAN_AFTER"), type=DURATION, default="7d", show_default=True,
              show_envvar=True, help="Archived jobs older than this are deleted.")
@click.option("--interval", envvar=env("CLEANER_INTERVAL"), type=DURATION, default="2s", show_default=True,
              show_envvar=True, help="Time between cleaning passes.")
@click.option("--lease-ttl", envvar=env("LEASE_TTL"), type=DURATION, default="10s", show_default=True,
              show_envvar=True, help="Cleaner lease; a standby takes over this long after the holder dies.")
def start_cleaner(considered_dead_after: timedelta, heartbeat_interval: timedelta, clean_after: timedelta,
                  interval: timedelta, lease_ttl: timedelta, **opts: Any) -> None:
    """Run the cleaner (one active; others stand by)."""
    config = _valid(lambda: CleanerConfig(
        considered_dead_after_s=seconds(considered_dead_after), clean_after_s=seconds(clean_after),
        interval_s=seconds(interval), lease_ttl_s=seconds(lease_ttl)))
    dead_after_s = config.considered_dead_after_s
    _check_dead_after(dead_after_s, seconds(heartbeat_interval), "--heartbeat-interval")

    async def check_roster(db: Any) -> None:
        """Workers already registered with a longer interval count too (refused the same way)."""
        worker = await db.roster.find_one({"heartbeat_interval_s": {"$gt": dead_after_s / 2}},
                                          {"heartbeat_interval_s": 1}, sort=[("heartbeat_interval_s", -1)])
        interval_s = (worker or {}).get("heartbeat_interval_s")
        if isinstance(interval_s, (int, float)):
            _check_dead_after(dead_after_s, float(interval_s), f"the heartbeat interval of worker {worker['_id']!r}")

    run_process(opts, "recruiter-cleaner", lambda db, clock: CleanerProcess(db, clock, config), check=check_roster)


def _check_dead_after(dead_after_s: float, heartbeat_s: float, source: str) -> None:
    """``--considered-dead-after`` must leave room for one missed heartbeat: at least twice the interval."""
    if dead_after_s < 2 * heartbeat_s:
        raise click.UsageError(
            f"--considered-dead-after {format_seconds(dead_after_s)} is shorter than twice {source} "
            f"({format_seconds(heartbeat_s)}): a live worker would be taken for dead between two heartbeats; "
            f"use at least {format_seconds(2 * heartbeat_s)}")


def format_seconds(s: float) -> str:
    return f"{s:g}s" if s >= 1 else f"{s * 1000:g}ms"


@main.group("embedded", context_settings=CONTEXT)
def embedded_group() -> None:
    """The embedded development server (SecantusDB, optional), on the host and port of --target."""


def embedded_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--embedded-path", "storage", envvar=env("EMBEDDED_PATH"), type=click.Path(path_type=Path),
                      default=embedded.DEFAULT_STORAGE, show_default=True, show_envvar=True,
                      help="Storage directory (start also takes :memory:); server.pid there names its server.")(fn)
    return target_option(fn)


@embedded_group.command("start")
@embedded_options
@click.option("--port", envvar=env("EMBEDDED_PORT"), type=click.IntRange(1, 65535), default=None,
              show_envvar=True, help="Listen on this port instead of the port of --target.")
@click.option("--host", envvar=env("EMBEDDED_HOST"), default=None, show_envvar=True,
              help="Listen on this address instead of the host of --target.")
def embedded_start(target: str, storage: Path, port: int | None, host: str | None) -> None:
    """Run the embedded server in the foreground until interrupted, where --target points."""
    try:
        t = parse_target(target)
        bind_host, bind_port = embedded.local_address(t) if host is None or port is None else (host, port)
        record = embedded.ServerRecord(0, host or bind_host, port or bind_port)
        if _answers(record.uri):
            raise ConnectionProblem(f"a server already answers at {record.uri}")
        proc = embedded.start(record.port, storage, host=record.host)
        record = embedded.ServerRecord(proc.pid, record.host, record.port)
        wait_until_reachable(parse_target(record.uri), timeout_s=30.0)
    except ConnectionProblem as exc:
        raise click.ClickException(str(exc)) from None
    keep_record = str(storage) != ":memory:"
    if keep_record:
        embedded.write_record(storage, record)
    click.echo(f"embedded server pid {proc.pid} on {record.uri.rstrip('/')}/{t.database} (storage: {storage}); "
               "Ctrl-C or 'recruiter embedded stop' stops it", err=True)

    def forward(signum: int, _frame: Any) -> None:
        proc.send_signal(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, forward)
    code = proc.wait()
    if keep_record and embedded.read_record(storage) == record:
        (storage / embedded.PID_FILE).unlink(missing_ok=True)
    sys.exit(code)


@embedded_group.command("stop")
@embedded_options
def embedded_stop(target: str, storage: Path) -> None:
    """Stop the embedded server running on --embedded-path (started by 'start' or by --embedded)."""
    stopped = embedded.stop_recorded(storage)
    if stopped is None:
        raise click.ClickException(f"no embedded server runs on storage {storage} (no live server.pid there)")
    click.echo(f"stopped the embedded server pid {stopped.pid} on {stopped.uri}")


@embedded_group.command("status")
@embedded_options
def embedded_status(target: str, storage: Path) -> None:
    """Whether an embedded server runs on --embedded-path, where, and whether it answers (exit 1 if none)."""
    record = embedded.read_record(storage)
    if record is None or not embedded.is_running(record):
        elsewhere = " (but a server answers at the target)" if _answers(target) else ""
        click.echo(f"no embedded server runs on storage {storage}{elsewhere}")
        sys.exit(1)
    answering = "answering" if _answers(record.uri) else "not answering"
    click.echo(f"embedded server pid {record.pid} on {record.uri}, storage {storage}: {answering}")


def _answers(uri: str) -> bool:
    try:
        wait_until_reachable(parse_target(uri), timeout_s=1.0)
    except ConnectionProblem:
        return False
    return True


@main.command("status")
@click.option("--target", envvar=list(URI_ENVVARS), default=DEFAULT_URI, show_default=True, show_envvar=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(target: str, as_json: bool) -> None:
    """Counts of queued, running and archived jobs, and the roster."""
    from recruiter.cli.status import collect_status, render_status

    try:
        t = parse_target(target)
        wait_until_reachable(t, timeout_s=5.0)
        figures = collect_status(t)
    except ConnectionProblem as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(render_status(figures, as_json))


@main.group("workers")
def workers_group() -> None:
    """Inspect the roster and stop workers remotely."""


@workers_group.command("list")
@click.option("--target", envvar=list(URI_ENVVARS), default=DEFAULT_URI, show_default=True, show_envvar=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def workers_list(target: str, as_json: bool) -> None:
    """Every roster entry: groups, state, job, pid, host, last heartbeat."""
    import json

    from recruiter.cli.workers import describe_workers, render_workers

    def read(db: Any, now: Any) -> None:
        rows = describe_workers(db, now)
        click.echo(json.dumps(rows, indent=2) if as_json else render_workers(rows))

    _with_database(target, read)


@workers_group.command("stop")
@click.argument("ids", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Stop every worker in the roster.")
@click.option("--target", envvar=list(URI_ENVVARS), default=DEFAULT_URI, show_default=True, show_envvar=True)
def workers_stop(ids: tuple[str, ...], all_: bool, target: str) -> None:
    """Ask workers to stop gracefully (ID also names its --concurrency slots ID-0, ID-1...)."""
    from recruiter.cli.workers import request_stop

    if bool(ids) == all_:
        raise click.UsageError("give worker ids or --all (not both)")

    def stop(db: Any, _now: Any) -> None:
        asked = request_stop(db, None if all_ else list(ids))
        if not asked:
            raise click.ClickException(f"no worker in the roster matches {', '.join(ids) or 'anything'}")
        click.echo(f"asked {len(asked)} worker(s) to stop: {', '.join(asked)}")

    _with_database(target, stop)


@main.group("jobs")
def jobs_group() -> None:
    """Act on single jobs."""


@jobs_group.command("cancel")
@click.argument("ids", nargs=-1, required=True)
@click.option("--reason", help="Kept in the archived job (cancel_reason, and the cancelled execution's message).")
@click.option("--target", envvar=list(URI_ENVVARS), default=DEFAULT_URI, show_default=True, show_envvar=True)
def jobs_cancel(ids: tuple[str, ...], reason: str | None, target: str) -> None:
    """Cancel jobs: archived with why "cancelled"; a worker running one halts it.

    A job a worker has already finished is left to the recruiter. Exits 1 if
    any job could not be cancelled.
    """
    from recruiter.domain.cancel import ALREADY_ARCHIVED, FINISHING, NOT_FOUND, cancel_job, parse_job_id

    try:
        job_ids = [parse_job_id(i) for i in ids]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="IDS") from None

    def cancel(db: Any, now: Any) -> None:
        try:
            results = [cancel_job(db, job_id, now, reason) for job_id in job_ids]
        except RuntimeError as exc:  # the job kept changing under the cancel
            raise click.ClickException(str(exc)) from None
        for r in results:
            click.echo(r.describe())
        if any(r.state in (FINISHING, ALREADY_ARCHIVED, NOT_FOUND) for r in results):
            raise SystemExit(1)

    _with_database(target, cancel)


def _with_database(target_uri: str, action: Callable[[Any, Any], None]) -> None:
    try:
        t = parse_target(target_uri)
        wait_until_reachable(t, timeout_s=5.0)
        client = sync_client(t, app_name="recruiter-admin", server_selection_timeout_s=5.0)
        try:
            clock = ServerClock()
            clock.calibrate_sync(client)
            action(client[t.database], clock.now())
        except PyMongoError as exc:
            raise click.ClickException(describe(exc, t)) from None
        finally:
            client.close()
    except ConnectionProblem as exc:
        raise click.ClickException(str(exc)) from None


@main.group("groups")
def groups_group() -> None:
    """Pause and resume groups: a paused group's jobs stay queued and are not assigned."""


@main.group("tenants")
def tenants_group() -> None:
    """Pause and resume tenants: a paused tenant's jobs stay queued and are not assigned."""


def _switch_commands(group: click.Group, kind: str) -> None:
    plural = control.KINDS[kind]

    @group.command("pause")
    @click.argument("names", nargs=-1, required=True)
    @click.option("--force", is_flag=True, help=f"Pause even a {kind} that no job or worker has used.")
    @common_options
    def pause(names: tuple[str, ...], force: bool, **opts: Any) -> None:
        _switch(kind, names, True, opts, force=force)

    @group.command("resume")
    @click.argument("names", nargs=-1, required=True)
    @common_options
    def resume(names: tuple[str, ...], **opts: Any) -> None:
        _switch(kind, names, False, opts)

    @group.command("list")
    @common_options
    def list_(**opts: Any) -> None:
        _switch(kind, (), None, opts)

    pause.help = (f"Pause {plural}: the recruiter stops assigning their jobs from its next round. "
                  f"A {kind} that no job or worker has ever used is refused without --force (a typo?).")
    resume.help = f"Resume paused {plural}."
    list_.help = f"List the paused {plural}."


def _switch(kind: str, names: tuple[str, ...], pause: bool | None, opts: dict[str, Any], *,
            force: bool = False) -> None:
    """Pause (True), resume (False) or list (None) groups or tenants, then print the paused ones."""
    logs.configure(opts["log_level"], opts["log_format"])
    for name in names:
        problem = name_problem(kind, name)
        if problem:
            raise click.UsageError(problem)
    target: Target | None = None
    try:
        target = connect_target(opts["target"], opts["embedded"], opts["embedded_path"])
        client = sync_client(target, app_name="recruiter-cli")
        try:
            db = client[target.database]
            if pause:
                _check_used(db, kind, list(names), force)
            metadata = SyncCollections.of(db).metadata
            paused = read_paused(metadata) if pause is None else switch_paused(
                metadata, kind, list(names), pause)
        finally:
            client.close()
    except ConnectionProblem as exc:
        raise click.ClickException(str(exc)) from None
    except PyMongoError as exc:
        if opts["log_level"] == "debug" or target is None:
            raise
        raise click.ClickException(describe(exc, target)) from None
    now = sorted(paused.groups if kind == "group" else paused.tenants)
    click.echo(f"paused {control.KINDS[kind]}: " + (", ".join(now) if now else "none"))


def _check_used(db: Any, kind: str, names: list[str], force: bool) -> None:
    """Refuse (or, with ``force``, warn about) pausing names that no job or worker has used."""
    ensure_indexes_sync(db)  # the checks are served by indexes; a fresh database has none yet
    unused = unused_names(db, kind, names)
    if not unused:
        return
    listed = ", ".join(repr(n) for n in unused)
    what = f"no job or worker has ever used the {kind}{'s' if len(unused) > 1 else ''} {listed}"
    if not force:
        raise click.ClickException(f"{what} (a typo?); nothing was paused. Pause anyway with --force")
    click.echo(f"Warning: {what}; pausing anyway (--force)", err=True)


_switch_commands(groups_group, "group")
_switch_commands(tenants_group, "tenant")


def _valid(build: Callable[[], Any]) -> Any:
    try:
        return build()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def recruiter_main() -> None:
    """Entry point of the ``recruiter`` command."""
    main(prog_name="recruiter")


def worker_main() -> None:
    """Entry point of the ``worker`` command (and ``bin/worker``): ``worker start ...``."""
    worker_group(prog_name="worker")


def cleaner_main() -> None:
    """Entry point of the ``cleaner`` command (and ``bin/cleaner``): ``cleaner start ...``."""
    cleaner_group(prog_name="cleaner")


if __name__ == "__main__":
    recruiter_main()
