"""The operator's commands: ``status`` and ``workers list|stop`` (``jobs ...`` is in :mod:`recruiter.cli.jobs`).

Invariant: each command connects, reads or writes through :mod:`recruiter.admin`
with the server's time, and prints; a server that does not answer, or refuses,
is one line on stderr and exit 1.
"""

from __future__ import annotations

import json
from datetime import datetime

import click

from recruiter.admin.status import status as read_status
from recruiter.admin.workers import stop_workers
from recruiter.cli.options import Command, env, target_option, with_database
from recruiter.cli.output import echo
from recruiter.cli.status import figures_of, render_status
from recruiter.cli.workers import describe_workers, render_workers
from recruiter.store import SyncDb, Target, shared_database_warning

WORKER_GROUPS_HELP = ("Show the @worker:ID groups (each worker's own, for the jobs aimed at it) with the groups; "
                      "by default they are left out (status counts them apart).")


def worker_groups_option(fn: Command) -> Command:
    return click.option("--include-worker-groups", is_flag=True, envvar=env("INCLUDE_WORKER_GROUPS"),
                        show_envvar=True, help=WORKER_GROUPS_HELP)(fn)


@click.command("status")
@target_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@worker_groups_option
def status(target: Target, as_json: bool, include_worker_groups: bool) -> None:
    """Counts of queued, running and archived jobs, and the roster; a warning on stderr when the
    database holds collections that are not recruiter's (give it its own database or a prefix)."""

    def show(db: SyncDb, now: datetime) -> None:
        shared = shared_database_warning(db)  # one listCollections
        if shared:
            echo(f"warning: {shared}", err=True)
        echo(render_status(figures_of(read_status(db, now), include_worker_groups), as_json))

    with_database(target, show)


@click.group("workers")
def workers_group() -> None:
    """Inspect the roster and stop workers remotely."""


@workers_group.command("list")
@target_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@worker_groups_option
def workers_list(target: Target, as_json: bool, include_worker_groups: bool) -> None:
    """Every roster entry: groups, state, job, pid, host, last heartbeat."""

    def read(db: SyncDb, now: datetime) -> None:
        rows = describe_workers(db, now, include_worker_groups)
        echo(json.dumps(rows, indent=2, default=str) if as_json else render_workers(rows))

    with_database(target, read)


@workers_group.command("stop")
@click.argument("ids", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Stop every worker in the roster.")
@target_option
def workers_stop(ids: tuple[str, ...], all_: bool, target: Target) -> None:
    """Ask workers to stop gracefully (ID also names its --concurrency slots ID-0, ID-1...)."""
    if bool(ids) == all_:
        raise click.UsageError("give worker ids or --all (not both)")

    def stop(db: SyncDb, _now: datetime) -> None:
        asked = stop_workers(db, None if all_ else list(ids))
        if not asked:
            raise click.ClickException(f"no worker in the roster matches {', '.join(ids) or 'anything'}")
        echo(f"asked {len(asked)} worker(s) to stop: {', '.join(asked)}")

    with_database(target, stop)
