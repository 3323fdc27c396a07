"""``recruiter limits set|list|clear``: rate limits and concurrency caps per group and tenant.

Invariant: every value is checked before anything is written (a malformed rate, a cap of 0:
one line, exit 2, nothing changed); a tenant no job has used yet is set with a warning, as
tenants appear over time. Semantics: docs/operations/flow-control.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime

import click

from recruiter.admin import limits as admin_limits
from recruiter.admin.limits import LimitView
from recruiter.cli.options import target_option, with_database
from recruiter.cli.output import echo
from recruiter.domain.limits import Limit
from recruiter.domain.naming import name_problem
from recruiter.domain.stored_limits import StoredLimit
from recruiter.store import SyncDb, Target


@click.group("limits")
def limits_group() -> None:
    """Rate limits and concurrency caps per group and tenant, enforced by the recruiter."""


def _where(fn: click.decorators.FC) -> click.decorators.FC:
    fn = click.option("--tenant", default=None, help="A tenant within the group (default: the whole group).")(fn)
    return click.option("--group", required=True, help="The group the limit applies to.")(fn)


def _valid(make: Callable[[], Limit]) -> Limit:
    try:
        return make()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


@limits_group.command("set")
@_where
@click.option("--rate", default=None, metavar="N/UNIT",
              help="At most N starts per interval, paced: 5/s, 100/m, 1000/h, 3/10s (retries count).")
@click.option("--burst", type=click.IntRange(0, 1_000_000), default=None,
              help="This many more starts at once after a quiet spell (needs a rate; default: as it was, or 0).")
@click.option("--max-running", type=int, default=None,
              help="At most this many jobs assigned or running at once, cluster-wide (1 or more).")
@click.option("--replace", is_flag=True,
              help="Make the limit exactly what is given: the fields not given are removed (default: kept).")
@target_option
def limits_set(group: str, tenant: str | None, rate: str | None, burst: int | None, max_running: int | None,
               replace: bool, target: Target) -> None:
    """Set the limit of a group, or of one tenant within it, from the next round on.

    The fields given change; the others keep their values unless --replace."""
    if rate is None and max_running is None and burst is None:
        raise click.UsageError("give --rate, --max-running, or both")
    if rate is not None or max_running is not None:  # the values, checked before anything is read
        _valid(lambda: admin_limits.make_limit(rate, burst if rate is not None or replace else None, max_running))
    _names(group, tenant)

    def write(db: SyncDb, now: datetime) -> None:
        try:
            done = admin_limits.set_fields(db, group, tenant, rate=rate, burst=burst, max_running=max_running,
                                           replace=replace, now=now)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        if done.unknown_tenant:
            echo(f"Warning: no job has used the tenant {tenant!r} yet; the limit applies once one does",
                 err=True)
        if done.dropped:
            echo(f"Warning: --replace removed {', '.join(done.dropped)} from the limit", err=True)
        echo(f"limit set: {done.view.describe()}{_was(done)}")

    with_database(target, write)


def _was(done: admin_limits.LimitSet) -> str:
    if done.replaced_malformed is not None:
        return f" (replaced a malformed limit: {done.replaced_malformed})"
    if done.replaced is not None:
        return f" (was: {done.replaced})" if done.replaced != done.view.limit else " (unchanged)"
    return " (new)"


def _names(group: str, tenant: str | None) -> None:
    """A usage error, one line, for a name no job could carry."""
    for kind, name in (("group", group), ("tenant", tenant)):
        if name is not None and (problem := name_problem(kind, name)):
            raise click.UsageError(problem)


@limits_group.command("clear")
@_where
@target_option
def limits_clear(group: str, tenant: str | None, target: Target) -> None:
    """Remove the limit of a group, or of one tenant within it."""
    _names(group, tenant)

    def write(db: SyncDb, _now: datetime) -> None:
        what = f"group {group}" if tenant is None else f"tenant {tenant} of group {group}"
        if admin_limits.clear(db, group, tenant):
            echo(f"limit cleared: {what}")
        else:
            echo(f"no limit on {what}; nothing changed", err=True)

    with_database(target, write)


@limits_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@target_option
def limits_list(as_json: bool, target: Target) -> None:
    """Every stored limit: applied, with the jobs it counts now and the tokens of its rate, or
    malformed and why (the recruiter holds it: at the last good limit it read, or whole)."""

    def read(db: SyncDb, now: datetime) -> None:
        listing = admin_limits.listing(db, now)
        for problem in listing.problems:
            echo(f"Warning: {problem}", err=True)
        rows = [_row(v) for v in listing.limits] + [_malformed_row(e) for e in listing.malformed]
        rows.sort(key=lambda r: (str(r["group"]), str(r["tenant"] or ""), str(r["path"])))
        if as_json:
            echo(json.dumps(rows, indent=2))
        elif not rows:
            echo("no limits")
        else:
            echo(_table(rows))

    with_database(target, read)


def _row(v: LimitView) -> dict[str, object]:
    rate = v.limit.rate
    return {"group": v.group, "tenant": v.tenant, "path": v.path, "state": "applied", "problem": None,
            "rate": rate.text if rate else None, "burst": rate.burst if rate else None,
            "max_running": v.limit.max_running, "running": v.running,
            "tokens": None if v.tokens is None else round(v.tokens, 2), "held": v.held}


def _malformed_row(e: StoredLimit) -> dict[str, object]:
    return {"group": e.key[0], "tenant": e.key[1], "path": e.path, "state": "malformed", "problem": e.problem,
            "rate": None, "burst": None, "max_running": None, "running": None, "tokens": None, "held": True}


def _table(rows: list[dict[str, object]]) -> str:
    heads = ["group", "tenant", "rate", "burst", "max_running", "running", "tokens", "held", "state"]
    cells = [[("-" if r[h] is None else str(r[h])) for h in heads[:-1]] + [_state(r)] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def _state(row: dict[str, object]) -> str:
    if row["state"] == "applied":
        return "applied"
    return f"malformed at {row['path']}: {row['problem']}"
