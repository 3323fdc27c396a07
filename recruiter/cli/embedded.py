"""``recruiter embedded start|stop|status``: the embedded development server on the host and port of --target.

Invariant: these commands only ever start, stop or look at a server on this
machine, recorded in ``<storage>/server.pid`` (see :mod:`recruiter.processes.embedded`).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from types import FrameType

import click

from recruiter.cli.options import CONTEXT, Command, env, uri_option
from recruiter.cli.output import echo
from recruiter.processes import embedded
from recruiter.store import ConnectionProblem, parse_target, wait_until_reachable


@click.group("embedded", context_settings=CONTEXT)
def embedded_group() -> None:
    """The embedded development server (SecantusDB, optional), on the host and port of --target."""


def embedded_options(fn: Command) -> Command:
    fn = click.option("--embedded-path", "storage", envvar=env("EMBEDDED_PATH"), type=click.Path(path_type=Path),
                      default=embedded.DEFAULT_STORAGE, show_default=True, show_envvar=True,
                      help="Storage directory (start also takes :memory:); server.pid there names its server.")(fn)
    return uri_option(fn)


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
    shown = storage.absolute() if keep_record else storage
    if keep_record:
        embedded.write_record(storage, record)
    echo(f"embedded server pid {proc.pid} on {record.uri.rstrip('/')}/{t.database} (storage: {shown}); "
         "Ctrl-C or 'recruiter embedded stop' stops it", err=True)

    def forward(signum: int, _frame: FrameType | None) -> None:
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
        raise click.ClickException(
            f"no embedded server runs on storage {storage.absolute()} (no live server.pid there)")
    echo(f"stopped the embedded server pid {stopped.pid} on {stopped.uri}")


@embedded_group.command("status")
@embedded_options
def embedded_status(target: str, storage: Path) -> None:
    """Whether an embedded server runs on --embedded-path, where, and whether it answers (exit 1 if none)."""
    record = embedded.read_record(storage)
    if record is None or not embedded.is_running(record):
        elsewhere = " (but a server answers at the target)" if _answers(target) else ""
        echo(f"no embedded server runs on storage {storage.absolute()}{elsewhere}")
        sys.exit(1)
    answering = "answering" if _answers(record.uri) else "not answering"
    echo(f"embedded server pid {record.pid} on {record.uri}, storage {storage.absolute()}: {answering}")


def _answers(uri: str) -> bool:
    try:
        wait_until_reachable(parse_target(uri), timeout_s=1.0)
    except ConnectionProblem:
        return False
    return True
