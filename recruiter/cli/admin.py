"""The operator's commands: ``status``, ``workers list|stop`` and ``jobs cancel``.

Invariant: each command connects, reads or writes through :mod:`recruiter.store`
with the server's time, and prints; a server that does not answer, or refuses,
is one line on stderr and exit 1.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime

import click

from recruiter.cli.options import target_option
from recruiter.cli.status import collect_status, render_status
from recruiter.cli.workers import describe_workers, render_workers
from recruiter.domain.cancel import ALREADY_ARCHIVED, FINISHING, NOT_FOUND, parse_job_id
from recruiter.store import (
    ConnectionProblem,
    ServerClock,
    StoreError,
    SyncCollections,
    SyncDb,
    cancel_job,
    describe,
    parse_target,
    request_stop,
    sync_client,
    wait_until_reachable,
)


@click.command("status")
@target_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(target: str, as_json: bool) -> None:
    """Counts of queued, running and archived jobs, and the roster."""
    try:
        t = parse_target(target)
        wait_until_reachable(t, timeout_s=5.0)
        figures = collect_status(t)
    except ConnectionProblem as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(render_status(figures, as_json))


@click.group("workers")
def workers_group() -> None:
    """Inspect the roster and stop workers remotely."""


@workers_group.command("list")
@target_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def workers_list(target: str, as_json: bool) -> None:
    """Every roster entry: groups, state, job, pid, host, last heartbeat."""

    def read(db: SyncDb, now: datetime) -> None:
        rows = describe_workers(db, now)
        click.echo(json.dumps(rows, indent=2) if as_json else render_workers(rows))

    _with_database(target, read)


@workers_group.command("stop")
@click.argument("ids", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Stop every worker in the roster.")
@target_option
def workers_stop(ids: tuple[str, ...], all_: bool, target: str) -> None:
    """Ask workers to stop gracefully (ID also names its --concurrency slots ID-0, ID-1...)."""
    if bool(ids) == all_:
        raise click.UsageError("give worker ids or --all (not both)")

    def stop(db: SyncDb, _now: datetime) -> None:
        asked = request_stop(SyncCollections.of(db).roster, None if all_ else list(ids))
        if not asked:
            raise click.ClickException(f"no worker in the roster matches {', '.join(ids) or 'anything'}")
        click.echo(f"asked {len(asked)} worker(s) to stop: {', '.join(asked)}")

    _with_database(target, stop)


@click.group("jobs")
def jobs_group() -> None:
    """Act on single jobs."""


@jobs_group.command("cancel")
@click.argument("ids", nargs=-1, required=True)
@click.option("--reason", help="Kept in the archived job (cancel_reason, and the cancelled execution's message).")
@target_option
def jobs_cancel(ids: tuple[str, ...], reason: str | None, target: str) -> None:
    """Cancel jobs: archived with why "cancelled"; a worker running one halts it.

    A job a worker has already finished is left to the recruiter. Exits 1 if
    any job could not be cancelled.
    """
    try:
        job_ids = [parse_job_id(i) for i in ids]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="IDS") from None

    def cancel(db: SyncDb, now: datetime) -> None:
        try:
            results = [cancel_job(db, job_id, now, reason) for job_id in job_ids]
        except RuntimeError as exc:  # the job kept changing under the cancel
            raise click.ClickException(str(exc)) from None
        for r in results:
            click.echo(r.describe())
        if any(r.state in (FINISHING, ALREADY_ARCHIVED, NOT_FOUND) for r in results):
            raise SystemExit(1)

    _with_database(target, cancel)


def _with_database(target_uri: str, action: Callable[[SyncDb, datetime], None]) -> None:
    """Run ``action(db, now)`` on the target's database, ``now`` on the server's clock."""
    try:
        t = parse_target(target_uri)
        wait_until_reachable(t, timeout_s=5.0)
        client = sync_client(t, app_name="recruiter-admin", server_selection_timeout_s=5.0)
        try:
            clock = ServerClock()
            clock.calibrate_sync(client)
            action(client[t.database], clock.now())
        except StoreError as exc:
            raise click.ClickException(describe(exc, t)) from None
        finally:
            client.close()
    except ConnectionProblem as exc:
        raise click.ClickException(str(exc)) from None
