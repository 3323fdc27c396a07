"""How ``recruiter jobs list`` and ``jobs show`` print a job: a table row, the whole history, or JSON.

Invariant: rendering reads nothing and never raises on data. A view comes from
untrusted documents (:mod:`recruiter.domain.following` keeps a field of the
wrong type out of it, but parameters, results and executions are shown as
stored), so every value goes through :func:`plain`, which turns any BSON value
into JSON (ids as strings, dates in ISO 8601) and anything else into its text.
Every one-line field is printed through :func:`~recruiter.cli.output.cell` (its control
characters escaped, newline included); parameters, result, messages, traces and logs are
cut at ``VALUE_BOUND`` characters, with their size and ``--full`` said, unless ``full``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from recruiter.cli.output import cell
from recruiter.domain.attempt import cut_marker
from recruiter.domain.cancel import halt_line
from recruiter.domain.dependencies import held_state
from recruiter.domain.following import JobView, Progress
from recruiter.domain.jsonable import plain as plain  # re-exported: the views speak of it
from recruiter.domain.records import Raw
from recruiter.domain.refused import refused_json
from recruiter.domain.snooze import max_snoozes_of, snoozes_of
from recruiter.domain.visible import cut, visible
from recruiter.domain.waiting import Explanation

MISSING = "-"




def _text(value: object) -> str:
    return MISSING if value is None else cell(value)


def _whole(text: str, full: bool) -> tuple[str, str | None]:
    """``text`` cut at ``VALUE_BOUND`` characters unless ``full``, and the note saying so (None when whole)."""
    shown = cut(text)
    if full or not shown.cut:
        return text, None
    return shown.text, f"({shown.note()}; jobs show --full prints it whole)"


def _time(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else MISSING


def state_of(view: JobView) -> str:
    """``running``, ``queued``...; ``archived: <why>`` for an archived job; a job workers gave
    back unrun says so: ``retrying (refused by worker w: module not allowed (jobs:Send))``."""
    if view.state == "archived":
        return f"archived: {view.why}"
    if view.waiting_for is not None:  # .after(...): held until they end
        return held_state(view.waiting_for, view.waiting_count)
    return f"{view.state} ({view.refused.short()})" if view.refused is not None and view.refused.current \
        else view.state


def progress_json(progress: Progress | None) -> dict[str, Any] | None:
    if progress is None:
        return None
    return {"value": progress.value, "message": progress.message, "at": plain(progress.at)}


def row_json(view: JobView) -> dict[str, Any]:
    """One job of ``jobs list --json``."""
    return {
        "id": plain(view.id), "state": view.state, "why": view.why, "reason": view.reason,
        "group": view.group, "tenant": view.tenant, "tags": list(view.tags), "class": view.class_name,
        "attempts": view.attempts, "created_at": plain(view.created_at),
        "scheduled_at": plain(view.scheduled_at), "archived_at": plain(view.archived_at),
        "worker": view.worker, "progress": progress_json(view.progress), "retry_of": plain(view.retry_of),
        "refused": refused_json(view.refused),
        "retried_as": plain(view.retried_as),
        "waiting_for": None if view.waiting_for is None else [plain(i) for i in view.waiting_for],
    }


def render_table(views: Sequence[JobView]) -> str:
    """``jobs list``: one line per job."""
    header = ("id", "state", "group", "tenant", "class", "attempts", "time (UTC)", "worker / progress")
    rows = [header] + [
        (cell(plain(v.id)), cell(state_of(v)), _text(v.group), _text(v.tenant), _text(v.class_name), str(v.attempts),
         _time(v.archived_at if v.state == "archived" else v.created_at), _holder(v))
        for v in views
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _holder(view: JobView) -> str:
    if view.worker is None:
        return ""
    return cell(view.worker + (f" {view.progress.describe()}" if view.progress is not None else ""))


def explanation_json(why: Explanation) -> dict[str, Any]:
    """``jobs explain --json``."""
    return {"id": plain(why.job_id), "code": str(why.code), "text": why.text, "details": plain(why.details)}


def show_json(view: JobView, waiting: Explanation | None = None) -> dict[str, Any]:
    """``jobs show --json``: the job, what it waits for (if it waits), and every execution kept."""
    workable = view.document.get("workable")
    return {
        **row_json(view),
        "waiting": None if waiting is None else {"code": str(waiting.code), "text": waiting.text},
        "parameters": plain(workable.get("parameters")) if isinstance(workable, Mapping) else None,
        "result": plain(view.result), "result_dropped": plain(view.result_dropped),
        "executions": [plain(e) for e in executions_of(view)],
        "unique": plain(view.document.get("unique")), "resubmits": plain(view.document.get("resubmits")),
        "snoozes": snoozes_of(view.document), "max_snoozes": max_snoozes_of(view.document),
    }


def executions_of(view: JobView) -> list[Raw]:
    """Every execution kept, oldest first; the last one with what only ``last_execution`` holds (its trace).

    ``executions`` keeps each attempt without its trace; ``last_execution`` is the
    latest attempt whole. A document with only the latter (an older version's) shows it alone.
    """
    runs = list(view.executions)
    last = view.last_execution
    if last is None:
        return runs
    if runs and runs[-1].get("attempt") == last.get("attempt"):
        runs[-1] = {**last, **{k: v for k, v in runs[-1].items() if v is not None}}
    elif not runs:
        runs = [last]
    return runs


def render_show(view: JobView, waiting: Explanation | None = None, full: bool = False) -> str:
    """``jobs show``: the job, what it waits for (``waiting``, if it waits), then each execution
    with its error, trace and logs; long values cut unless ``full``."""
    doc = view.document
    workable = doc.get("workable")
    params = workable.get("parameters") if isinstance(workable, Mapping) else None
    lines = [
        f"job        {cell(plain(view.id))}",
        f"state      {cell(state_of(view))}" + (f" ({cell(view.reason)})" if view.reason else ""),
        *([f"waiting    {waiting.code}: {cell(waiting.text)}"] if waiting is not None else []),
        *([f"refused    {cell(view.refused.describe())}"] if view.refused is not None else []),
        f"class      {_text(view.class_name)}",
        *_value_lines("parameters ", json.dumps(plain(params)), full),
        f"group      {_text(view.group)}",
        f"tenant     {_text(view.tenant)}",
        f"tags       {cell(', '.join(view.tags)) or MISSING}",
        f"attempts   {view.attempts}" + _crashes(doc.get("crashes")),
        f"created    {_iso(view.created_at)}",
        f"scheduled  {_iso(view.scheduled_at)}",
    ]
    if view.archived_at is not None:
        lines.append(f"archived   {_iso(view.archived_at)}")
    lines.extend(_cancel_lines(doc))
    lines.extend(_operators(view))
    lines.extend(_unique_and_resubmits(doc))
    if view.worker is not None:
        lines.append(f"worker     {cell(view.worker)}")
    if view.progress is not None:
        lines.append(f"progress   {cell(view.progress.describe())} (at {_iso(view.progress.at)})")
    if view.state == "archived" and "result" in doc:
        lines.extend(_value_lines("result     ", json.dumps(plain(view.result)), full))
    if view.state == "archived" and view.result_dropped is not None:
        dropped = view.result_dropped
        reason, size = cell(str(dropped.get("reason"))[:300]), cell(dropped.get("size_bytes"))
        lines.append(f"result     dropped: {reason} (size: {size} bytes)")
    runs = executions_of(view)
    lines.append(f"executions {len(runs)}" + ("" if runs else " (none yet)"))
    first = runs[0].get("attempt") if runs else None
    if isinstance(first, int) and not isinstance(first, bool) and first > 1:
        lines.append(f"  (attempts 1 to {first - 1} are no longer kept)")
    for run in runs:
        lines.extend(_execution_lines(run, full))
    return "\n".join(lines)


def _operators(view: JobView) -> list[str]:
    """What else operators did to the job (its cancel: _cancel_lines): deleted (and why), the job it
    retries, its copy."""
    lines = []
    reason = view.document.get("delete_reason")
    if isinstance(reason, str):
        lines.append(f"deleted    {cell(reason)}")
    if view.retry_of is not None:
        lines.append(f"retry of   {cell(plain(view.retry_of))}")
    if view.retried_as is not None:
        lines.append(f"retried as {cell(plain(view.retried_as))}")
    return lines


def _value_lines(label: str, text: str, full: bool) -> list[str]:
    shown, note = _whole(text, full)
    return [f"{label}{cell(shown)}", *([f"           {note}"] if note else [])]


def _cancel_lines(doc: Raw) -> list[str]:
    """Why the job was cancelled, and whether its worker has stopped it (the archived ``halt``)."""
    cancel_reason, halt = doc.get("cancel_reason"), halt_line(doc, _iso)
    return ([f"cancelled  {cell(cancel_reason)}"] if isinstance(cancel_reason, str) else []) + (
        [f"halt       {cell(halt)}"] if halt is not None else [])


def _unique_and_resubmits(doc: Raw) -> list[str]:
    """The job's unique key (recruiter.domain.unique) and resubmits (recruiter.domain.resubmit), if any."""
    lines = []
    unique = doc.get("unique")
    if isinstance(unique, Mapping) and isinstance(unique.get("key"), str):
        until = unique.get("until")
        lines.append(f"unique     {cell(unique['key'])} ({_text(unique.get('scope'))}"
                     + (f" until {_iso(until)})" if isinstance(until, datetime) else ")"))
    flag, count = doc.get("resubmit"), doc.get("resubmits")
    if isinstance(flag, Mapping):
        at = flag.get("at")
        lines.append("resubmit   runs once more after this attempt"
                     + (f", at {_iso(at)}" if isinstance(at, datetime) else ""))
    if isinstance(count, int) and not isinstance(count, bool) and count > 0:
        lines.append(f"resubmits  {count}")
    if snoozes_of(doc) > 0:  # recruiter.domain.snooze
        lines.append(f"snoozes    {snoozes_of(doc)} (of at most {max_snoozes_of(doc)})")
    return lines


def _crashes(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return f" ({value} crashed)"
    return ""


def _iso(value: datetime | None) -> str:
    return value.isoformat() if value is not None else MISSING


def _execution_lines(run: Raw, full: bool = False) -> list[str]:
    started, ended = run.get("started_at"), run.get("ended_at")
    took = f" ({(ended - started).total_seconds():.3f}s)" if isinstance(started, datetime) and isinstance(
        ended, datetime) else ""
    lines = [f"  attempt {_text(run.get('attempt'))}: {_text(run.get('outcome'))}{took}"
             f"  worker {_text(run.get('worker'))} pid {_text(run.get('pid'))} host {_text(run.get('hostname'))}",
             f"    started {_text(plain(started))}  ended {_text(plain(ended))}"]
    if run.get("outcome") == "snoozed":  # recruiter.domain.snooze: not counted as an attempt
        lines.append(f"    snooze {_text(run.get('snooze'))} until {_text(plain(run.get('snoozed_until')))}")
    error, message = run.get("class"), run.get("message")
    if error is not None or message is not None:
        text, note = _whole(str(message), full) if message is not None else (MISSING, None)
        lines.append(f"    {_text(error)}: {cell(text)}" if error is not None else f"    {cell(text)}")
        lines.extend([f"    {note}"] if note else [])
    trace = run.get("trace")
    if isinstance(trace, str) and trace:
        lines.append("    trace:")
        lines.extend(_block(trace, full))
    logs, marker = run.get("logs"), cut_marker(run.get("logs_cut"))
    if isinstance(logs, str) and (logs or marker):
        lines.append("    logs:")
        if marker:
            lines.append(f"      {marker}")
        lines.extend(_block(logs, full))
    if run.get("details_dropped") is True:
        lines.append("    (trace and logs no longer kept: only the newest attempts keep them)")
    return lines


def _block(text: str, full: bool) -> list[str]:
    """A multi-line text (a trace, logs), indented, split on newlines only: every other control shown escaped."""
    shown, note = _whole(text, full)
    lines = ["      " + visible(line, multiline=True) for line in shown.rstrip("\n").split("\n")]
    return lines + ([f"      {note}"] if note else [])
