"""How ``recruiter schedules list`` and ``schedules show`` print a schedule: a table, the whole of one, or JSON.

Invariant: rendering reads nothing and never raises on data: a malformed
schedule is one row, its name and the reason (:mod:`recruiter.domain.schedule_view`
found it), and every stored value goes through :func:`recruiter.cli.jobs_view.plain`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence, Set
from datetime import datetime
from typing import Any

from recruiter.cli.jobs_view import MISSING, plain
from recruiter.domain.following import JobView
from recruiter.domain.schedule_view import StoredSchedule, outcome_of


def _time(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else MISSING


def _iso(value: datetime | None) -> str:
    return value.isoformat() if value is not None else MISSING


def _catch_up(view: StoredSchedule) -> str:
    mode = view.catch_up.get("mode")
    if mode == "all":
        return f"all (at most {plain(view.catch_up.get('limit'))})"
    if mode == "within":
        return f"within {plain(view.catch_up.get('within_s'))}s"
    return str(mode)


def _policy(policy: object) -> str:
    """``recruiter.retry:RetryManyTimes {"times": 3, "wait": 300.0}``, or the stored value as JSON."""
    if isinstance(policy, Mapping) and isinstance(policy.get("class"), str):
        return f"{policy['class']} {json.dumps(plain(policy.get('parameters')))}"
    return json.dumps(plain(policy))


def _next(view: StoredSchedule) -> str:
    return "paused" if view.paused else _time(view.next_fire_at)


def row_json(view: StoredSchedule, jobs: Mapping[object, JobView], stale: bool) -> dict[str, Any]:
    """One schedule of ``schedules list --json``."""
    if view.malformed:
        return {"name": view.name, "malformed": view.problem}
    last = view.last_fire
    return {
        "name": view.name, "cron": view.cron, "every_s": view.every_s, "tz": view.tz, "paused": view.paused,
        "next_fire_at": plain(view.next_fire_at),
        "last_fire": None if last is None else {"slot": plain(last.slot), "at": plain(last.at),
                                                "job": plain(last.job)},
        "last_outcome": None if last is None else outcome_of(view, jobs),
        "skipped": view.skipped, "run_now": plain(view.run_now), "stale": stale,
    }


def render_table(views: Sequence[StoredSchedule], jobs: Mapping[object, JobView], stale: Set[str]) -> str:
    """``schedules list``: one line per schedule; a malformed one says why instead."""
    header = ("name", "rule", "next fire (UTC)", "last slot (UTC)", "last fired (UTC)", "last outcome", "skipped",
              "")
    rows: list[tuple[str, ...]] = [header]
    for v in views:
        if v.malformed:
            rows.append((v.name, f"malformed: {v.problem}", "", "", "", "", "", ""))
            continue
        last = v.last_fire
        marks = [m for m, on in (("stale", v.name in stale), ("run-now pending", v.run_now is not None)) if on]
        rows.append((v.name, v.rule(), _next(v), _time(last.slot if last else None),
                     _time(last.at if last else None), outcome_of(v, jobs), str(v.skipped), ", ".join(marks)))
    # A malformed row's reason spans the columns after the name: it does not widen them.
    widths = [max(len(r[i]) for r in rows if i == 0 or not r[1].startswith("malformed: ") or r is header)
              for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def show_json(view: StoredSchedule, jobs: Mapping[object, JobView], stale: bool) -> dict[str, Any]:
    """``schedules show --json``: the schedule whole."""
    if view.malformed:
        return {"name": view.name, "malformed": view.problem, "document": plain(view.document)}
    skip = view.last_skip
    return {
        **row_json(view, jobs, stale),
        "job": plain(view.job), "overlap": view.overlap, "catch_up": plain(view.catch_up),
        "jitter_s": view.jitter_s, "version": view.version, "created_at": plain(view.created_at),
        "updated_at": plain(view.updated_at), "declared_at": plain(view.declared_at),
        "next_slot": plain(view.next_slot),
        "last_skip": None if skip is None else {"slot": plain(skip.slot), "reason": skip.reason,
                                                "at": plain(skip.at)},
    }


def render_show(view: StoredSchedule, jobs: Mapping[object, JobView], stale: bool) -> str:
    """``schedules show``: the definition, the job it enqueues, its options and its firing so far."""
    if view.malformed:
        return "\n".join([f"schedule   {view.name}", f"malformed  {view.problem}",
                          f"document   {json.dumps(plain(view.document))}"])
    job = view.job
    workable = job.get("workable")
    last, skip = view.last_fire, view.last_skip
    lines = [
        f"schedule   {view.name}" + (" (stale: no longer declared)" if stale else ""),
        f"rule       {view.rule()}",
        f"paused     {'yes' if view.paused else 'no'}",
        f"class      {plain(workable.get('class')) if isinstance(workable, Mapping) else MISSING}",
        f"parameters {json.dumps(plain(workable.get('parameters')) if isinstance(workable, Mapping) else None)}",
        f"group      {plain(job.get('group')) or MISSING}",
        f"tenant     {plain(job.get('tenant')) or MISSING}",
        f"policy     {_policy(job.get('retry_policy'))}",
        f"overlap    {view.overlap}",
        f"catch-up   {_catch_up(view)}",
        f"jitter     {view.jitter_s:g}s",
        f"version    {view.version or MISSING}",
        f"declared   {_iso(view.declared_at)}",
        f"created    {_iso(view.created_at)}",
        f"updated    {_iso(view.updated_at)}",
        f"next fire  {'none (paused)' if view.paused else _iso(view.next_fire_at)}",
        f"next slot  {_iso(view.next_slot)}",
        "last fire  " + (MISSING if last is None else
                         f"slot {_iso(last.slot)} at {_iso(last.at)} job {plain(last.job)}: {outcome_of(view, jobs)}"),
        f"skipped    {view.skipped}" + ("" if skip is None else
                                        f" (last: slot {_iso(skip.slot)}, {skip.reason}, at {_iso(skip.at)})"),
        "run-now    " + ("none" if view.run_now is None else f"pending since {_iso(view.run_now)}"),
    ]
    return "\n".join(lines)
