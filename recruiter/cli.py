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
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import click
import structlog
from pymongo.errors import PyMongoError

from recruiter import control, embedded, logs
from recruiter.cleaner import CleanerConfig, CleanerProcess
from recruiter.clock import ServerClock
from recruiter.connection import (
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
from recruiter.durations import parse_duration
from recruiter.naming import module_problem, modules_under, name_problem
from recruiter.recruiting import RecruiterConfig, RecruiterProcess
from recruiter.selection import CountingScheme
from recruiter.sizes import parse_size
from recruiter.store import Collections, ensure_indexes
from recruiter.wakeup import Wake
from recruiter.worker import WorkerConfig, WorkerIdTaken, WorkerProcess

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


def common_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--target", envvar=list(URI_ENVVARS), default=DEFAULT_URI, show_default=True,
                     show_envvar=True, help="MongoDB URI; the database defaults to 'recruiter'."),
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


def run_process(opts: dict[str, Any], app_name: str,
                make: Callable[[Any, ServerClock], Any]) -> None:
    """Connect, build the process with ``make(db, clock)`` and run it until a signal stops it."""
    logs.configure(opts["log_level"], opts["log_format"])
    debug = opts["log_level"] == "debug"
    target: Target | None = None
    try:
        target = connect_target(opts["target"], opts["embedded"], opts["embedded_path"])
        code = asyncio.run(_main(target, app_name, make))
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


async def _main(target: Target, app_name: str, make: Callable[[Any, ServerClock], Any]) -> int:
    """Run the process; returns its exit status (non-zero e.g. for a worker over its memory limit)."""
    client = async_client(target, app_name=app_name)
    try:
        clock = ServerClock()
        await clock.calibrate(client)
        db = client[target.database]
        await ensure_indexes(db)
        process = make(db, clock)
        main = asyncio.current_task()
        assert main is not None
        signals = {"count": 0}

        def on_signal(signum: int) -> None:
            signals["count"] += 1
            if signals["count"] == 1:
                log.info("signal.received", signal=signal.Signals(signum).name, action="graceful stop")
                process.stop()
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
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
                loop.remove_signal_handler(sig)
        return int(getattr(process, "exit_code", 0))
    finally:
        await client.close()


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


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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


@main.group("worker")
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
        from recruiter.supervisor import supervise

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


@main.group("cleaner")
def cleaner_group() -> None:
    """The cleaner: dead workers and old history."""


@cleaner_group.command("start")
@common_options
@click.option("--considered-dead-after", envvar=env("CONSIDERED_DEAD_AFTER"), type=DURATION, default="30s",
              show_default=True, show_envvar=True, help="A worker silent this long is dead (missed heartbeats).")
@click.option("--clean-after", envvar=env("CLEAN_AFTER"), type=DURATION, default="7d", show_default=True,
              show_envvar=True, help="Archived jobs older than this are deleted.")
@click.option("--interval", envvar=env("CLEANER_INTERVAL"), type=DURATION, default="2s", show_default=True,
              show_envvar=True, help="Time between cleaning passes.")
@click.option("--lease-ttl", envvar=env("LEASE_TTL"), type=DURATION, default="10s", show_default=True,
              show_envvar=True, help="Cleaner lease; a standby takes over this long after the holder dies.")
def start_cleaner(considered_dead_after: timedelta, clean_after: timedelta, interval: timedelta,
                  lease_ttl: timedelta, **opts: Any) -> None:
    """Run the cleaner (one active; others stand by)."""
    config = _valid(lambda: CleanerConfig(
        considered_dead_after_s=seconds(considered_dead_after), clean_after_s=seconds(clean_after),
        interval_s=seconds(interval), lease_ttl_s=seconds(lease_ttl)))
    run_process(opts, "recruiter-cleaner", lambda db, clock: CleanerProcess(db, clock, config))


@main.group("embedded")
def embedded_group() -> None:
    """The embedded development server (SecantusDB, optional)."""


@embedded_group.command("start")
@click.option("--port", envvar=env("EMBEDDED_PORT"), type=click.IntRange(1, 65535), default=27017,
              show_default=True, show_envvar=True)
@click.option("--host", envvar=env("EMBEDDED_HOST"), default="127.0.0.1", show_default=True, show_envvar=True)
@click.option("--embedded-path", "storage", envvar=env("EMBEDDED_PATH"), default=str(embedded.DEFAULT_STORAGE),
              show_default=True, show_envvar=True, help="Storage directory, or :memory:.")
def embedded_start(port: int, host: str, storage: str) -> None:
    """Run the embedded server in the foreground until interrupted."""
    try:
        proc = embedded.start(port, storage, host=host)
    except ConnectionProblem as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"embedded server on mongodb://{host}:{port}/recruiter (storage: {storage}); Ctrl-C stops it",
               err=True)

    def forward(signum: int, _frame: Any) -> None:
        proc.send_signal(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, forward)
    sys.exit(proc.wait())


@main.command("status")
@click.option("--target", envvar=list(URI_ENVVARS), default=DEFAULT_URI, show_default=True, show_envvar=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(target: str, as_json: bool) -> None:
    """Counts of queued, running and archived jobs, and the roster."""
    from recruiter.status import collect_status, render_status

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

    from recruiter.roster import describe_workers, render_workers

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
    from recruiter.roster import request_stop

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
    from recruiter.cancel import ALREADY_ARCHIVED, FINISHING, NOT_FOUND, cancel_job, parse_job_id

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
    @common_options
    def pause(names: tuple[str, ...], **opts: Any) -> None:
        _switch(kind, names, True, opts)

    @group.command("resume")
    @click.argument("names", nargs=-1, required=True)
    @common_options
    def resume(names: tuple[str, ...], **opts: Any) -> None:
        _switch(kind, names, False, opts)

    @group.command("list")
    @common_options
    def list_(**opts: Any) -> None:
        _switch(kind, (), None, opts)

    pause.help = f"Pause {plural}: the recruiter stops assigning their jobs from its next round."
    resume.help = f"Resume paused {plural}."
    list_.help = f"List the paused {plural}."


def _switch(kind: str, names: tuple[str, ...], pause: bool | None, opts: dict[str, Any]) -> None:
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
            metadata = Collections.of(client[target.database]).metadata
            paused = control.read_paused(metadata) if pause is None else control.switch(
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


_switch_commands(groups_group, "group")
_switch_commands(tenants_group, "tenant")


def _valid(build: Callable[[], Any]) -> Any:
    try:
        return build()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def worker_main() -> None:
    """Entry point of ``bin/worker``: ``worker start ...``."""
    main(["worker", *sys.argv[1:]], prog_name="worker")


def cleaner_main() -> None:
    """Entry point of ``bin/cleaner``: ``cleaner start ...``."""
    main(["cleaner", *sys.argv[1:]], prog_name="cleaner")



if __name__ == "__main__":
    main(prog_name="recruiter")
