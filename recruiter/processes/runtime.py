"""Running a process (recruiter, worker, cleaner) until a signal stops it.

The command line builds a process and hands it here with its target; this
module gives it a client, the server's clock (recalibrated every minute) and
the indexes, then runs it under signal handlers.

Invariants: the first SIGINT or SIGTERM asks for a graceful stop
(:meth:`Process.stop`), the second forces it (:meth:`Process.force`: running jobs
are interrupted and given back); SIGUSR1 prints every task's stack. After a
stop request, a process whose server no longer answers and that holds no job
leaves at once (:func:`exit_without_server`) rather than waiting out a server
selection timeout for each of its last writes. The exit status is the
process's own (:attr:`Process.exit_code`, e.g. 75 for a worker over its memory
limit), and the signal handlers are removed before returning.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NoReturn, Protocol

import structlog

from recruiter.processes import round_stats
from recruiter.processes.events import Bus, Subscriber, load_subscriber
from recruiter.processes.metrics import MetricsConfig, ProcessMetrics
from recruiter.store import (
    AsyncClient,
    AsyncDb,
    ServerClock,
    StoreError,
    Target,
    answers_ping_within,
    async_client,
    async_db,
    ensure_indexes,
    monitoring,
    shared_database_warning_async,
)
from recruiter.store.connection import CommandListener

log = structlog.get_logger("recruiter.runtime")

RECALIBRATE_CLOCK_S = 60.0
STOP_PROBE_S = 1.0
# Set in the worker started by the --memory-limit supervisor, so that it runs the worker itself.
SUPERVISED = "RECRUITER_SUPERVISED_WORKER"


class Process(Protocol):
    """What the runtime asks of a process: run it, stop it gracefully or by force, and its exit status."""

    exit_code: int

    async def run(self) -> None: ...

    def stop(self) -> None:
        """Graceful stop: take no new work, finish what runs, leave."""

    def force(self) -> None:
        """Forced stop (a second signal): interrupt what runs and give it back."""

    def busy(self) -> bool:
        """Whether it holds work a graceful stop waits for (a running job)."""


Make = Callable[[AsyncDb, ServerClock], Process]
Check = Callable[[AsyncDb], Awaitable[None]]


@dataclass(frozen=True)
class Instruments:
    """What observes a process, made once at its edge and injected: the event bus (logs, the user's
    ``--subscriber`` callables, the round timings, the ``--metrics-port`` metrics) and the PyMongo
    command listeners of its clients.

    The benchmarks' instruments are asked for by environment variables, read here and nowhere
    else: ``RECRUITER_ROUND_STATS`` (:mod:`recruiter.processes.round_stats`) and
    ``RECRUITER_COMMAND_STATS`` (:mod:`recruiter.store.monitoring`)."""

    bus: Bus
    command_listeners: tuple[CommandListener, ...] = ()
    metrics: ProcessMetrics | None = None  # --metrics-port (recruiter.processes.metrics)

    @classmethod
    def build(cls, subscribers: Sequence[str] = (), metrics: MetricsConfig | None = None) -> Instruments:
        """From ``--subscriber`` specs (``module:callable``; ValueError, one line, if one cannot be loaded),
        the ``--metrics-*`` options and the environment. Call it in the main thread (the stats writers install
        a SIGUSR2 handler)."""
        loaded = [load_subscriber(spec) for spec in subscribers]
        rounds = round_stats.from_environment()
        served = ProcessMetrics(metrics) if metrics is not None else None
        more: list[Subscriber] = [*([rounds] if rounds else []), *([served.events] if served else [])]
        return cls(Bus.logging(*loaded, *more), tuple(monitoring.listeners()), served)


def run(target: Target, app_name: str, make: Make, check: Check | None = None, *,
        listeners: Sequence[CommandListener] = (), metrics: ProcessMetrics | None = None) -> int:
    """Connect to ``target``, build the process with ``make(db, clock)`` and run it until it ends.

    ``check(db)``, if given, runs first and may refuse to start by raising. ``listeners``
    observe the client's commands (:attr:`Instruments.command_listeners`); ``metrics``, if
    given, are served meanwhile (a port in use: ValueError, before anything is written).
    Returns the process's exit status.
    """
    with metrics.serving(target) if metrics is not None else contextlib.nullcontext():
        return asyncio.run(_main(target, app_name, make, check, listeners))


async def _main(target: Target, app_name: str, make: Make, check: Check | None,
                listeners: Sequence[CommandListener]) -> int:
    client = async_client(target, app_name=app_name, event_listeners=list(listeners))
    try:
        code = await _serve(client, target, make, check)
    except BaseException:
        await _close(client, target)
        raise
    if not await _close(client, target):
        _leave_now(code)
    return code


async def _serve(client: AsyncClient, target: Target, make: Make, check: Check | None) -> int:
    clock = ServerClock()
    await clock.calibrate(client)
    db = async_db(client, target)
    shared = await shared_database_warning_async(db)  # one listCollections, at start only
    if shared:
        log.warning("database.shared", problem=shared)
    await ensure_indexes(db)
    if check is not None:
        await check(db)
    process = make(db, clock)
    calibrator = asyncio.create_task(_recalibrate(clock, client), name="clock.calibrate")
    try:
        with _signals(process, client, target):
            await process.run()
    except asyncio.CancelledError:
        log.warning("process.forced_stop")
    finally:
        calibrator.cancel()
    return process.exit_code


async def _close(client: AsyncClient, target: Target) -> bool:
    """Close the client and return True, unless its server is gone: closing would then spend the
    server selection timeout (10 s) on the cursors it still means to kill (a change stream closed
    while the server was unreachable) and print the driver's traceback, for nothing the process's
    exit does not end. Returns False then, having said so in one line."""
    if await answers_ping_within(client, STOP_PROBE_S):
        await client.close()
        return True
    log.warning("process.exit_without_server", server=target.display,
                detail="the server does not answer: leaving without closing the connections")
    return False


def _leave_now(code: int) -> NoReturn:
    """End the process with ``code`` without waiting on the driver's background tasks. A client
    left open holds a task that kills the cursors it was told to; when the server is gone that task
    waits out server selection (10 s), and PyMongo 4.20's task does not end when the event loop
    cancels it at exit, so ``asyncio.run`` would wait with it."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@contextlib.contextmanager
def _signals(process: Process, client: AsyncClient, target: Target) -> Iterator[None]:
    """SIGINT/SIGTERM stop ``process`` (gracefully, then by force), SIGUSR1 dumps the tasks; removed on exit."""
    loop = asyncio.get_running_loop()
    watchdog: list[asyncio.Task[None]] = []

    def on_signal(signum: int) -> None:
        name = signal.Signals(signum).name
        if not watchdog:
            log.info("signal.received", signal=name, action="graceful stop")
            process.stop()
            watchdog.append(asyncio.create_task(exit_without_server(client, process, target), name="stop.watchdog"))
        else:
            log.warning("signal.received", signal=name, action="forced stop")
            process.force()  # the process interrupts its work and gives it back

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    # SIGUSR1 prints what every task is waiting on (py-spy cannot see coroutines).
    loop.add_signal_handler(signal.SIGUSR1, _dump_tasks)
    try:
        yield
    finally:
        for task in watchdog:
            task.cancel()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
            loop.remove_signal_handler(sig)


async def exit_without_server(client: AsyncClient, process: Process, target: Target) -> None:
    """After a stop request, end the process at once if its server is gone and it holds no job.

    Nothing it could still write (deregistering, releasing its lease) can reach the
    server, and every operation would first wait out its server selection timeout
    (10 s or more each). What it leaves behind is what a crash leaves, and is
    handled the same way: the cleaner removes its roster entry, a lease expires.
    A worker running a job waits for it first, as any graceful stop does.
    """
    await asyncio.sleep(STOP_PROBE_S)  # with a server, the stop ends in this time
    while True:
        if not process.busy() and not await answers_ping_within(client, STOP_PROBE_S):
            log.warning("process.exit_without_server", server=target.display,
                        detail="the server does not answer: leaving now without deregistering or releasing "
                               "leases; the cleaner removes this process's roster entries, and leases expire")
            _leave_now(0)
        await asyncio.sleep(STOP_PROBE_S)


def _dump_tasks() -> None:
    for task in asyncio.all_tasks():
        print(f"--- task {task.get_name()}", file=sys.stderr)
        task.print_stack(file=sys.stderr)
    sys.stderr.flush()


async def _recalibrate(clock: ServerClock, client: AsyncClient) -> None:
    while True:
        await asyncio.sleep(RECALIBRATE_CLOCK_S)
        with contextlib.suppress(StoreError):
            await clock.calibrate(client)


def needs_supervisor(memory_limit_bytes: int | None) -> bool:
    """Whether ``worker start`` must run its worker under the --memory-limit supervisor (not yet inside it)."""
    return memory_limit_bytes is not None and not os.environ.get(SUPERVISED)


def supervised(run_worker: Callable[..., None], *args: object) -> int:
    """Run ``run_worker(*args)`` in child processes, a fresh one each time one exits over its memory limit."""
    from recruiter.processes.worker.supervisor import supervise

    return supervise(run_worker, *args, child_env=SUPERVISED)
