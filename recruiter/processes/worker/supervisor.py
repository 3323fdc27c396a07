"""A small supervisor for ``worker start --memory-limit``.

A worker that is over its memory limit after a job stops cleanly and exits
with status 75 (:data:`recruiter.processes.worker.config.EXIT_MEMORY`). With ``--memory-limit``,
``worker start`` runs the worker as a child process and starts a fresh one
whenever it exits with that status, as the PHP Recruiter's supervisor did; any
other exit ends the supervisor with the same status. SIGTERM and SIGINT are
passed on to the child, which stops gracefully on the first and is forced on
the second. Under systemd, Kubernetes or supervisord, the same status tells the
process manager to restart the worker.

Invariant: the supervisor replaces a worker only after it exited with status 75
and no stop was asked for; it never runs two workers at once.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable
from multiprocessing.context import SpawnProcess
from types import FrameType

import click
import structlog

from recruiter.processes.worker.config import EXIT_MEMORY

log = structlog.get_logger("recruiter.supervisor")


def _child(run: Callable[..., None], args: tuple[object, ...]) -> None:
    # Out of the terminal's process group: Ctrl-C reaches the supervisor only, which passes it on once.
    os.setpgid(0, 0)
    try:
        run(*args)
    except click.ClickException as exc:
        exc.show()
        raise SystemExit(exc.exit_code) from None


def supervise(run: Callable[..., None], *args: object, child_env: str) -> int:
    """Run ``run(*args)`` in child processes until one exits with a status other than 75."""
    mp = multiprocessing.get_context("spawn")
    stopping = False
    child: SpawnProcess | None = None

    def forward(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.pid is not None:
            os.kill(child.pid, signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    os.environ[child_env] = "1"
    replaced = 0
    while True:
        child = mp.Process(target=_child, args=(run, args), name="recruiter-worker")
        child.start()
        log.info("supervisor.started_worker", pid=child.pid, replaced=replaced)
        child.join()
        code = int(child.exitcode or 0)
        if code != EXIT_MEMORY or stopping:
            return code if code >= 0 else 128 - code
        replaced += 1
        log.warning("supervisor.replacing_worker", pid=child.pid, reason="over its memory limit", replaced=replaced)
