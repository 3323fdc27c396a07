"""``recruiter schedules list|show|pause|resume|remove|run-now``: the operator's side of periodic jobs.

Schedules are defined in code (``rec.schedule``); these commands look at them and
switch them. ``remove`` is the only way a schedule is deleted: a schedule the
code no longer declares is listed as stale (``list --stale``), never removed silently.

Invariant: every write names one schedule and is conditional on the state it
changes from (:mod:`recruiter.admin.schedules`), prints one line, and an
unknown name is one line, exit 1, nothing changed. A malformed schedule document
is listed as malformed with its reason; it never makes a command fail. Times are
the server's.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import click

from recruiter.admin.schedules import (
    pause_schedule,
    remove_schedule,
    resume_schedule,
    schedule,
    schedules,
)
from recruiter.admin.schedules import run_now as request_run_now
from recruiter.cli.options import DURATION, env, target_option, with_database
from recruiter.cli.output import echo
from recruiter.cli.schedules_view import render_show, render_table, row_json, show_json
from recruiter.store import Change, SyncDb, Target

STALE_AFTER = "1h"


@click.group("schedules")
def schedules_group() -> None:
    """Periodic jobs: list them, show one, pause, resume, fire one now, remove."""


def _unknown(name: str) -> click.ClickException:
    return click.ClickException(f"no schedule named {name!r}; nothing changed (recruiter schedules list shows them)")


@schedules_group.command("list")
@click.option("--stale", is_flag=True,
              help="Only schedules no longer declared: declared longer than --stale-after before the newest "
                   "declaration of any schedule.")
@click.option("--stale-after", type=DURATION, default=STALE_AFTER, show_default=True, envvar=env("STALE_AFTER"),
              show_envvar=True, help="How much older than the newest declaration a stale schedule's is.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@target_option
def schedules_list(stale: bool, stale_after: timedelta, as_json: bool, target: Target) -> None:
    """List the schedules: rule, next fire, last fire and its outcome, skips.

    The last outcome is the archived job's why (done, tried-too-many-times...), or
    its state while it waits or runs; "gone" once the cleaner removed it.
    """

    def read(db: SyncDb, now: datetime) -> None:
        listing = schedules(db, now, stale_after, only_stale=stale)
        views, jobs, old = listing.schedules, listing.jobs, listing.stale
        if as_json:
            echo(json.dumps([row_json(v, jobs, v.name in old) for v in views], indent=2))
        elif views:
            echo(render_table(views, jobs, old))
        else:
            echo("no stale schedules" if stale else "no schedules")

    with_database(target, read)


@schedules_group.command("show")
@click.argument("name")
@click.option("--stale-after", type=DURATION, default=STALE_AFTER, show_default=True, envvar=env("STALE_AFTER"),
              show_envvar=True, help="How much older than the newest declaration a stale schedule's is.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@target_option
def schedules_show(name: str, stale_after: timedelta, as_json: bool, target: Target) -> None:
    """One schedule whole: its rule, the job it enqueues, its options, its firing and skips."""

    def show(db: SyncDb, now: datetime) -> None:
        detail = schedule(db, name, now, stale_after)
        if detail is None:
            raise click.ClickException(f"no schedule named {name!r} (recruiter schedules list shows them)")
        view, jobs, stale = detail.schedule, detail.jobs, detail.stale
        echo(json.dumps(show_json(view, jobs, stale), indent=2) if as_json else render_show(view, jobs, stale))

    with_database(target, show)


def _report(change: Change, name: str, done: str, already: str) -> None:
    if change is Change.UNKNOWN:
        raise _unknown(name)
    echo(done if change is Change.DONE else already)


@schedules_group.command("pause")
@click.argument("name")
@target_option
def schedules_pause(name: str, target: Target) -> None:
    """Pause a schedule: the recruiter fires none of its slots until it is resumed."""
    with_database(target, lambda db, now: _report(
        pause_schedule(db, name), name, f"paused {name}: no slot fires until it is resumed",
        f"{name} was already paused"))


@schedules_group.command("resume")
@click.argument("name")
@target_option
def schedules_resume(name: str, target: Target) -> None:
    """Resume a paused schedule: the recruiter computes its next fire from now, at its next round.

    The slots that passed while it was paused are not caught up.
    """
    with_database(target, lambda db, now: _report(
        resume_schedule(db, name), name, f"resumed {name}: the recruiter computes its next fire from now",
        f"{name} was not paused"))


@schedules_group.command("run-now")
@click.argument("name")
@target_option
def schedules_run_now(name: str, target: Target) -> None:
    """Fire one extra occurrence now, at the recruiter's next round (even of a paused schedule).

    Its slots are not changed. A run-now already pending is not doubled.
    """
    with_database(target, lambda db, now: _report(
        request_run_now(db, name, now), name, f"run-now requested for {name}: the recruiter fires it at its "
        "next round", f"a run-now of {name} is already pending; nothing changed"))


@schedules_group.command("remove")
@click.argument("name")
@target_option
def schedules_remove(name: str, target: Target) -> None:
    """Delete a schedule (its jobs already enqueued stay). The code declaring it would declare it again."""
    with_database(target, lambda db, now: _report(
        remove_schedule(db, name), name, f"removed {name} (jobs it already enqueued stay; a rec.schedule "
        "call for it defines it again)", ""))
