"""``recruiter jobs list|show|explain|retry|cancel|retry-now|delete``: following and acting on single jobs.

Invariant: every argument is checked before the database is touched (a
malformed id, an unknown state, a bad page token or a contradictory filter is
one line and exit 2), and a command that writes (``retry``, ``cancel``,
``retry-now``, ``delete``) checks every id it is given before it writes anything:
one bad id and nothing changes. Each says, per job, what it did, and a second run
writes nothing and says so.
Reads and writes go through the read model (:mod:`recruiter.admin.jobs`), judged on the
server's clock; this module parses and prints.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import click
from bson import ObjectId

from recruiter.admin.explain import explain_job, show_and_explain
from recruiter.admin.jobs import (
    Retried,
    RetryRefusedAll,
    cancel_jobs,
    delete_jobs,
    list_jobs,
    retry_archived,
    retry_jobs,
    retry_now_jobs,
)
from recruiter.cli.jobs_view import explanation_json, plain, render_show, render_table, row_json, show_json
from recruiter.cli.options import DURATION, target_option, with_database
from recruiter.cli.output import echo
from recruiter.domain.cancel import ALREADY_ARCHIVED, FINISHING, NOT_FOUND, parse_job_id
from recruiter.domain.following import STATES
from recruiter.domain.listing import EARLIEST, JobFilter, decode_page_key, encode_page_key, parse_states
from recruiter.domain.waiting_actions import ALREADY_ARCHIVED as GONE
from recruiter.domain.waiting_actions import DELETED, REFUSED, ActionResult
from recruiter.domain.waiting_actions import NOT_FOUND as UNKNOWN
from recruiter.store import SyncDb, Target

MAX_PAGE = 1000


class IsoDate(click.ParamType):  # type: ignore[type-arg]
    """A date and time in ISO 8601, ``2026-11-23`` or ``2026-11-23T02:00:00Z``; UTC unless it says otherwise."""

    name = "date"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            parsed = datetime.fromisoformat(str(value))
        except ValueError:
            self.fail(f"{value!r} is not a date: use ISO 8601, like 2026-11-23 or 2026-11-23T02:00:00Z",
                      param, ctx)
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


@click.group("jobs")
def jobs_group() -> None:
    """Follow jobs: list them, show one's history, explain why one waits, retry archived ones, cancel."""


def _job_ids(ids: Sequence[str]) -> list[object]:
    try:
        return [parse_job_id(i) for i in ids]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="ID") from None


# -- list ----------------------------------------------------------------------------------------


@jobs_group.command("list")
@click.option("--state", "states", multiple=True, metavar="STATE[,STATE]",
              help=f"Only jobs in these states ({', '.join(STATES)}); repeat or separate by commas.")
@click.option("--group", help="Only jobs of this group.")
@click.option("--tenant", help="Only jobs of this tenant.")
@click.option("--class", "class_name", metavar="MODULE:QUALNAME", help="Only jobs of this workable class.")
@click.option("--why", help="Only jobs archived with this why (done, cancelled, tried-too-many-times...).")
@click.option("--tag", help="Only jobs carrying this tag.")
@click.option("--since", type=DURATION, help="Only jobs whose time is within the last DURATION (1h, 30m...).")
@click.option("--from", "from_", type=IsoDate(),
              help="Only jobs whose time is at or after this date (ISO 8601, UTC by default).")
@click.option("--until", type=IsoDate(), help="Only jobs whose time is at or before this date.")
@click.option("--limit", type=click.IntRange(1, MAX_PAGE), default=50, show_default=True, help="Jobs per page.")
@click.option("--after", metavar="TOKEN", help="The next page: the token the previous page printed.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array (the next page's command on stderr).")
@target_option
def jobs_list(states: tuple[str, ...], group: str | None, tenant: str | None, class_name: str | None,
              why: str | None, tag: str | None, since: timedelta | None, from_: datetime | None,
              until: datetime | None, limit: int, after: str | None, as_json: bool, target: Target) -> None:
    """List jobs, newest first by their time (created_at while waiting, archived_at once archived).

    Waiting and running jobs come from `scheduled`, archived ones from `archived`
    (--why implies --state archived). Each page ends with the command printing the next.
    """
    try:
        wanted = parse_states(states)
        page_key = decode_page_key(after) if after is not None else None
        if since is not None and from_ is not None:
            raise ValueError("give --since or --from, not both")
        base = JobFilter.build(wanted, why=why, class_name=class_name, since=from_, until=until,
                               group=group, tenant=tenant, tag=tag)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None

    def read(db: SyncDb, now: datetime) -> None:
        try:
            f = base if since is None else JobFilter.build(
                wanted, why=why, class_name=class_name, since=now - since, until=until, group=group, tenant=tenant,
                tag=tag)
        except ValueError as exc:  # --since reaches back to after --until
            raise click.UsageError(str(exc)) from None
        page = list_jobs(db, f, page_key, limit, now)
        if as_json:
            echo(json.dumps([row_json(v) for v in page.views], indent=2))
        else:
            echo(render_table(page.views) if page.views else "no jobs match")
        if page.next is not None:
            next_args = _list_args(click.get_current_context().params)
            echo("next page: recruiter jobs list " + shlex.join([*next_args, "--after",
                                                                 encode_page_key(page.next)]),
                 err=as_json)

    with_database(target, read)


def _list_args(params: dict[str, object]) -> list[str]:
    """The filter options of this listing, as given (not ``--target``: it may hold a password)."""
    args: list[str] = []
    for name in ("states", "group", "tenant", "class_name", "why", "tag", "since", "from_", "until", "limit"):
        value = params.get(name)
        flag = "--" + {"states": "state", "class_name": "class", "from_": "from"}.get(name, name)
        if value is None or value == ():
            continue
        for item in value if isinstance(value, tuple) else (value,):
            args += [flag, _arg(item)]
    return args + (["--json"] if params.get("as_json") else [])


def _arg(value: object) -> str:
    if isinstance(value, timedelta):
        return f"{value.total_seconds():g}s"
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


# -- show ----------------------------------------------------------------------------------------


@jobs_group.command("show")
@click.argument("job_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (every value whole).")
@click.option("--full", is_flag=True, help="Print long values whole: parameters, result, messages, traces and logs "
                                           "are otherwise cut at 4096 characters, with their size said.")
@target_option
def jobs_show(job_id: str, as_json: bool, full: bool, target: Target) -> None:
    """One job whole: its state (and progress while it runs), and every execution with its trace and logs."""
    (parsed,) = _job_ids([job_id])

    def show(db: SyncDb, now: datetime) -> None:
        view, why = show_and_explain(db, parsed, now)
        if view is None:
            raise click.ClickException(f"no job {job_id} (neither waiting nor archived)")
        waiting = why if why is not None and why.waiting else None
        echo(json.dumps(show_json(view, waiting), indent=2) if as_json else render_show(view, waiting, full))

    with_database(target, show)


# -- explain -------------------------------------------------------------------------------------


@jobs_group.command("explain")
@click.argument("job_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: id, code, text and details.")
@target_option
def jobs_explain(job_id: str, as_json: bool, target: Target) -> None:
    """Why a job is not running, in one line: due later, retrying, its group or tenant paused, no
    live worker takes its group, its aimed worker gone, behind N jobs of its tenant, assigned to a
    worker whose heartbeat is late... (or running, or archived).

    A handful of indexed reads, whatever the size of the queue; "behind N" is counted up to 1000.
    """
    (parsed,) = _job_ids([job_id])

    def show(db: SyncDb, now: datetime) -> None:
        why = explain_job(db, parsed, now)
        if why is None:
            raise click.ClickException(f"no job {job_id} (neither waiting nor archived)")
        echo(json.dumps(explanation_json(why), indent=2) if as_json else f"{why.code}: {why.text}")

    with_database(target, show)


# -- retry ---------------------------------------------------------------------------------------


@jobs_group.command("retry")
@click.argument("ids", nargs=-1, metavar="[ID]...")
@click.option("--why", help="Retry every job archived with this why (instead of IDs).")
@click.option("--since", type=DURATION, help="With --why: only those archived in the last DURATION.")
@click.option("--group", help="With --why: only those of this group.")
@click.option("--limit", type=click.IntRange(min=1), help="With --why: at most this many, the newest first.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@target_option
def jobs_retry(ids: tuple[str, ...], why: str | None, since: timedelta | None, group: str | None,
               limit: int | None, as_json: bool, target: Target) -> None:
    """Put archived jobs back in the queue as new jobs (retry_of names the original, whose
    retried_as names the copy).

    A job is retried at most once: retrying it again prints "already retried as"
    its copy and writes nothing (retry the copy if it failed too). By ID, every
    job must be archived, or nothing is retried. With --why, jobs already retried
    are left out, and jobs archived malformed (quarantined) are skipped: they
    cannot be retried.
    """
    if bool(ids) == (why is not None):
        raise click.UsageError("give job ids or --why (not both)")
    if ids and (since is not None or group is not None or limit is not None):
        raise click.UsageError("--since, --group and --limit go with --why")
    job_ids = _job_ids(ids)

    def retry(db: SyncDb, now: datetime) -> None:
        try:
            retried = retry_jobs(db, job_ids, now) if why is None else retry_archived(
                db, why, now - since if since else EARLIEST, group, limit, now)
        except RetryRefusedAll as exc:
            raise click.ClickException(str(exc)) from None
        _print_retried(retried, as_json)

    with_database(target, retry)


def _print_retried(retried: Retried, as_json: bool) -> None:
    if as_json:
        echo(json.dumps({
            "retried": [{"id": plain(d.id), "retry_of": plain(d.retry_of)} for d in retried.jobs],
            "already_retried": [{"id": plain(d.id), "retry_of": plain(d.retry_of)} for d in retried.already],
            "skipped": list(retried.skipped)}, indent=2))
    else:
        for d in retried.jobs:
            echo(f"{plain(d.retry_of)}  retried as {plain(d.id)}")
        for d in retried.already:
            echo(f"{plain(d.retry_of)}  already retried as {plain(d.id)} (nothing written)")
        echo(f"retried {len(retried.jobs)} job(s)"
             + (f", {len(retried.already)} already retried" if retried.already else ""))
    for reason in retried.skipped:
        echo(f"skipped {reason}", err=True)


# -- cancel --------------------------------------------------------------------------------------


@jobs_group.command("cancel")
@click.argument("ids", nargs=-1, required=True)
@click.option("--reason", help="Kept in the archived job (cancel_reason, and the cancelled execution's message).")
@target_option
def jobs_cancel(ids: tuple[str, ...], reason: str | None, target: Target) -> None:
    """Cancel jobs: archived with why "cancelled"; a worker running one halts it.

    A job running in a worker's thread cannot be stopped: it runs to its end,
    its outcome discarded, and keeps its max_running slot until then (each line
    says which). A job a worker has already finished is left to the recruiter.
    Exits 1 if any job could not be cancelled.
    """
    try:
        job_ids = [parse_job_id(i) for i in ids]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="IDS") from None

    def cancel(db: SyncDb, now: datetime) -> None:
        try:
            results = cancel_jobs(db, job_ids, now, reason)
        except RuntimeError as exc:  # the job kept changing under the cancel
            raise click.ClickException(str(exc)) from None
        for r in results:
            echo(r.describe())
        if any(r.state in (FINISHING, ALREADY_ARCHIVED, NOT_FOUND) for r in results):
            raise SystemExit(1)

    with_database(target, cancel)



# -- retry now, delete ---------------------------------------------------------------------------


def _ids_option(ids: tuple[str, ...]) -> list[ObjectId]:
    try:
        return [parse_job_id(i) for i in dict.fromkeys(ids)]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="IDS") from None


def _report(act: Callable[[], list[ActionResult]], kept_why: str | None = None) -> None:
    """Act, print one line per job; exit 1 if one was refused, unknown, or archived otherwise than ``kept_why``."""
    try:
        results = act()
    except RuntimeError as exc:  # the job kept changing under the action
        raise click.ClickException(str(exc)) from None
    for r in results:
        echo(r.describe())
    if any(r.state in (REFUSED, UNKNOWN) or (r.state == GONE and r.detail != kept_why) for r in results):
        raise SystemExit(1)


@jobs_group.command("retry-now")
@click.argument("ids", nargs=-1, required=True)
@target_option
def jobs_retry_now(ids: tuple[str, ...], target: Target) -> None:
    """End the backoff of jobs waiting for their next attempt (state retrying, due later): due now.

    The job keeps its attempts and retry policy. A job already due is left as it
    is ("already due"); one in another state is refused with what it is. Exits 1
    if any job was refused or is unknown.
    """
    job_ids = _ids_option(ids)
    with_database(target, lambda db, now: _report(lambda: retry_now_jobs(db, job_ids, now)))


@jobs_group.command("delete")
@click.argument("ids", nargs=-1, required=True)
@click.option("--reason", help="Kept in the archived job (delete_reason).")
@target_option
def jobs_delete(ids: tuple[str, ...], reason: str | None, target: Target) -> None:
    """Delete waiting jobs (queued, delayed, retrying): archived with why "deleted", they never run.

    A job a worker holds (assigned, running) is refused: `jobs cancel` halts it.
    A job already deleted is left as it is. Exits 1 if any job was refused, is
    unknown, or was archived otherwise.
    """
    job_ids = _ids_option(ids)
    with_database(target, lambda db, now: _report(lambda: delete_jobs(db, job_ids, now, reason), DELETED))
