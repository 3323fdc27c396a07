"""``recruiter workflows list|stats|show|cancel|retry``: workflows and batches (issue 42) as operators see them.

A workflow is the set of jobs enqueued together by ``Workflow(...).enqueue(rec)`` or
``Batch(...)`` (:mod:`recruiter.producer.workflows`), each a named step. ``show`` prints every
step's state as a tree; ``cancel`` cancels the steps not ended (through ``jobs cancel``'s
path); ``retry`` retries a failed step and what did not run after it (through ``jobs
retry``'s path). Each action prints one line per step saying what happened to it.

Invariant: an id is checked before the database is touched; a workflow or step that does
not exist is one line, exit 1, nothing changed; a job whose ``workflow`` field is
malformed is listed as set aside with its reason, never a failure of the command.
"""

from __future__ import annotations

import json
from datetime import datetime

import click
from bson import ObjectId

from recruiter.admin.workflow_view import list_workflows, read_workflow, stats_by_name
from recruiter.admin.workflows import WorkflowActionRefused, cancel_workflow, retry_workflow
from recruiter.cli.options import env, target_option, with_database
from recruiter.cli.output import echo
from recruiter.cli.workflows_view import render_list, render_show, render_stats, row_json, show_json, stats_json
from recruiter.store import SyncDb, Target


@click.group("workflows")
def workflows_group() -> None:
    """Workflows and batches: list them, show one's steps, cancel one, retry its failed steps."""


def _id(text: str) -> ObjectId:
    if not ObjectId.is_valid(text):
        raise click.BadParameter(f"{text!r} is not a workflow id (24 hexadecimal digits)", param_hint="ID")
    return ObjectId(text)


@workflows_group.command("list")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True, envvar=env("LIMIT"),
              show_envvar=True, help="The newest this many workflows.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@target_option
def workflows_list(limit: int, as_json: bool, target: Target) -> None:
    """List workflows, newest first: name, kind, state and counts of their jobs."""

    def read(db: SyncDb, now: datetime) -> None:
        rows, aside = list_workflows(db, limit)
        if as_json:
            echo(json.dumps([row_json(r) for r in rows], indent=2))
            if aside:
                echo(f"{aside} job(s) set aside: their workflow field is malformed", err=True)
        else:
            echo(render_list(rows, aside))

    with_database(target, read)


@workflows_group.command("stats")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@target_option
def workflows_stats(as_json: bool, target: Target) -> None:
    """Per workflow name (its kind): how many workflows run, are done or failed, and their jobs.

    One aggregation per collection over the jobs of every workflow (the by_workflow index)."""

    def read(db: SyncDb, now: datetime) -> None:
        rows, aside = list_workflows(db, None)
        stats = stats_by_name(rows)
        echo(json.dumps([stats_json(k) for k in stats], indent=2) if as_json else render_stats(stats))
        if aside:
            echo(f"{aside} job(s) set aside: their workflow field is malformed", err=True)

    with_database(target, read)


@workflows_group.command("show")
@click.argument("workflow_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@target_option
def workflows_show(workflow_id: str, as_json: bool, target: Target) -> None:
    """Show a workflow: every step's state, its job and the steps it waits for."""
    wid = _id(workflow_id)

    def read(db: SyncDb, now: datetime) -> None:
        view = read_workflow(db, wid)
        if view is None:
            raise click.ClickException(f"no workflow {wid} (recruiter workflows list shows them)")
        echo(json.dumps(show_json(view), indent=2) if as_json else render_show(view))

    with_database(target, read)


@workflows_group.command("cancel")
@click.argument("workflow_id", metavar="ID")
@click.option("--reason", help="Kept in each cancelled step's archived job (default: the workflow was cancelled).")
@target_option
def workflows_cancel(workflow_id: str, reason: str | None, target: Target) -> None:
    """Cancel a workflow: every step not ended is cancelled (a running one halted where its worker
    can halt it); one line per step. Exits 1 if a step could not be cancelled."""
    wid = _id(workflow_id)

    def cancel(db: SyncDb, now: datetime) -> None:
        try:
            done = cancel_workflow(db, wid, now, reason)
        except (WorkflowActionRefused, RuntimeError) as exc:
            raise click.ClickException(str(exc)) from None
        for d in done:
            echo(d.describe())
        if any(d.what.startswith("not cancelled, worker") or d.what == "no such job" for d in done):
            raise SystemExit(1)

    with_database(target, cancel)


@workflows_group.command("retry")
@click.argument("workflow_id", metavar="ID")
@click.option("--step", help="The failed step to retry (default: every failed step); the steps after it that "
                             "did not end done are retried with it.")
@target_option
def workflows_retry(workflow_id: str, step: str | None, target: Target) -> None:
    """Retry a workflow's failed step (new jobs of the same workflow, each waiting for its deps);
    its dependents resume after it. One line per step."""
    wid = _id(workflow_id)

    def retry(db: SyncDb, now: datetime) -> None:
        try:
            done = retry_workflow(db, wid, now, step)
        except WorkflowActionRefused as exc:
            raise click.ClickException(str(exc)) from None
        for d in done:
            echo(d.describe())
        if any(d.what.startswith("not retried") for d in done):
            raise SystemExit(1)

    with_database(target, retry)
