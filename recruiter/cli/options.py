"""The options the commands share, and the value types they parse.

Invariant: every option is also an environment variable (``RECRUITER_<NAME>``,
shown in ``--help``), and ``--target`` is defined once, here (it reads
``RECRUITER_MONGODB_URI`` or ``MONGODB_URI``). Values are checked as they are
parsed, so a command body only ever sees valid durations, sizes and schemes.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeVar

import click

from recruiter.domain.durations import parse_duration
from recruiter.domain.selection import CountingScheme
from recruiter.domain.sizes import parse_size
from recruiter.domain.versions import WORKS_BESIDE
from recruiter.processes import embedded, logs
from recruiter.store import (
    DEFAULT_URI,
    PREFIX_ENVVAR,
    URI_ENVVARS,
    ConnectionProblem,
    DeploymentRefused,
    ServerClock,
    StoreError,
    SyncDb,
    Target,
    check_deployment,
    command_listeners,
    describe,
    first_line,
    is_timeout,
    parse_target,
    prefix_problem,
    sync_client,
    sync_db,
    wait_until_reachable,
    within,
)

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
# What every program's --version prints (recruiter.domain.versions: the release and the oldest it works beside).
VERSION_MESSAGE = f"%(prog)s (recruiter) %(version)s; works beside {WORKS_BESIDE} and later"

Command = Callable[..., None]
T = TypeVar("T")


class Duration(click.ParamType):  # type: ignore[type-arg]
    """A duration such as ``200ms``, ``30s``, ``5m``, ``2h`` or ``5d``."""

    name = "duration"

    def __init__(self, *, zero: bool = False) -> None:
        self.zero = zero  # whether 0s is allowed

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> timedelta:
        if isinstance(value, timedelta):
            return value
        try:
            td = parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if td < timedelta() or (td == timedelta() and not self.zero):
            self.fail(f"{value!r} must be longer than zero", param, ctx)
        return td


class Size(click.ParamType):  # type: ignore[type-arg]
    """A memory size such as ``512MB`` or ``2G`` (powers of 1024)."""

    name = "size"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_size(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class Scheme(click.ParamType):  # type: ignore[type-arg]
    """A counting scheme ``HIGH,LOW`` such as ``4,1``."""

    name = "high,low"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> CountingScheme:
        if isinstance(value, CountingScheme):
            return value
        try:
            return CountingScheme.parse(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


DURATION = Duration()
DURATION_OR_ZERO = Duration(zero=True)
SIZE = Size()
SCHEME = Scheme()


def env(name: str) -> str:
    return f"RECRUITER_{name}"


def uri_option(fn: Command) -> Command:
    """``--target``: the MongoDB URI, the one definition every command uses."""
    return click.option("--target", envvar=list(URI_ENVVARS), default=DEFAULT_URI, show_default=True,
                        show_envvar=True, help="MongoDB URI; the database defaults to 'recruiter'.")(fn)


def _checked_prefix(ctx: click.Context, param: click.Parameter, value: str) -> str:
    problem = prefix_problem(value)
    if problem:
        raise click.BadParameter(f"{value!r}: {problem}", ctx, param)
    return value


def prefix_option(fn: Command) -> Command:
    """``--collection-prefix``: the prefix of recruiter's collection names (recruiter.store.names)."""
    return click.option("--collection-prefix", "collection_prefix", envvar=PREFIX_ENVVAR, default="",
                        show_envvar=True, callback=_checked_prefix,
                        help="Prefix of recruiter's collection names in the database, with its separator "
                             "('recruiter_': recruiter_scheduled, ...); default none. Every process, command "
                             "and producer of one queue uses the same.")(fn)


def target_option(fn: Command) -> Command:
    """``--target`` and ``--collection-prefix``; the command receives them as one ``target``
    (a :class:`Target`, the URI checked: a bad one is one line)."""

    @functools.wraps(fn)
    def with_target(*args: object, target: str, collection_prefix: str, **kwargs: object) -> None:
        try:
            checked = parse_target(target, collection_prefix)
        except ConnectionProblem as exc:
            raise click.ClickException(str(exc)) from None
        fn(*args, target=checked, **kwargs)

    return uri_option(prefix_option(with_target))


@dataclass(frozen=True)
class Common:
    """The options of every command that connects: where, whether to start a server, how to log."""

    target: str
    embedded: bool
    embedded_path: Path
    log_level: str
    log_format: str
    prefix: str = ""  # --collection-prefix

    @property
    def debug(self) -> bool:
        return self.log_level == "debug"


def common_options(fn: Command) -> Command:
    """Adds the :class:`Common` options; the command receives them as one ``common`` argument."""

    @functools.wraps(fn)
    def with_common(*args: object, target: str, embedded: bool, embedded_path: Path, log_level: str,
                    log_format: str, collection_prefix: str, **kwargs: object) -> None:
        fn(*args, common=Common(target, embedded, embedded_path, log_level, log_format, collection_prefix), **kwargs)

    options: list[Callable[[Command], Command]] = [
        uri_option,
        prefix_option,
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
    command: Command = with_common
    for option in reversed(options):
        command = option(command)
    return command


class Refused(click.ClickException):
    """A refusal to start, in one line, with the exit status of a usage error (2)."""

    exit_code = 2


def connection_error(exc: ConnectionProblem) -> click.ClickException:
    """One line for a target that cannot be used: exit 2 for a server recruiter cannot run on
    (standalone, too old), 1 for one that does not answer or a bad URI."""
    return Refused(str(exc)) if isinstance(exc, DeploymentRefused) else click.ClickException(str(exc))


def connect_target(common: Common) -> Target:
    """The target of ``--target``, reachable (started first with ``--embedded`` if nothing answers)."""
    if common.embedded:
        return replace(embedded.ensure_running(common.target, common.embedded_path), prefix=common.prefix)
    target = parse_target(common.target, common.prefix)
    wait_until_reachable(target, timeout_s=5.0)
    check_deployment(target)  # a standalone or too old server: DeploymentRefused, one line
    return target


def valid(build: Callable[[], T]) -> T:
    """``build()``, with a ValueError (a config refusing a value) shown as a usage error."""
    try:
        return build()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def seconds(td: timedelta) -> float:
    return td.total_seconds()


def format_seconds(s: float) -> str:
    return f"{s:g}s" if s >= 1 else f"{s * 1000:g}ms"


# How long an operator command may take at most, whatever the server does (0: no limit).
COMMAND_TIMEOUT_ENVVAR = "RECRUITER_COMMAND_TIMEOUT"
DEFAULT_COMMAND_TIMEOUT_S = 120.0


def command_timeout_s() -> float | None:
    """``RECRUITER_COMMAND_TIMEOUT`` (a duration; 0 for none), or two minutes."""
    text = os.environ.get(COMMAND_TIMEOUT_ENVVAR)
    if not text:
        return DEFAULT_COMMAND_TIMEOUT_S
    try:
        limit = parse_duration(text).total_seconds()
    except ValueError as exc:
        raise click.UsageError(f"{COMMAND_TIMEOUT_ENVVAR}: {exc}") from None
    return limit or None


def with_database(t: Target, action: Callable[[SyncDb, datetime], None]) -> None:
    """Run ``action(db, now)`` on the target's database, ``now`` on the server's clock.

    A server that does not answer, or refuses, is one line (ClickException); one that
    stalls holds the command at most ``RECRUITER_COMMAND_TIMEOUT`` (every server call of
    the command gets the time left of it: recruiter.store.deadlines).
    """
    try:
        limit_s = command_timeout_s()
        wait_until_reachable(t, timeout_s=5.0)
        client = sync_client(t, app_name="recruiter-admin", server_selection_timeout_s=5.0,
                             event_listeners=command_listeners())  # RECRUITER_COMMAND_STATS, if set
        try:
            with within(limit_s):
                clock = ServerClock()
                clock.calibrate_sync(client, samples=1)  # ages in seconds: one reading
                action(sync_db(client, t), clock.now())
        except StoreError as exc:
            if is_timeout(exc):
                raise click.ClickException(f"the server did not answer within {limit_s:g}s "
                                           f"(RECRUITER_COMMAND_TIMEOUT): {first_line(exc)}") from None
            raise click.ClickException(describe(exc, t)) from None
        finally:
            client.close()
    except ConnectionProblem as exc:
        raise click.ClickException(str(exc)) from None
