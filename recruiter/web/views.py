"""What the templates show, made from the read model's values: plain text, executions, failure groups.

Invariant: pure, and never raises on data. A view comes from untrusted documents
(parameters, results and executions are shown as stored), so every stored value
goes through :func:`plain` before a template sees it, and the templates escape
everything they print (Jinja's autoescape).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from recruiter.domain.cancel import halt_line
from recruiter.domain.following import JobView
from recruiter.domain.jsonable import plain as plain  # re-exported: the views speak of it
from recruiter.domain.records import Raw

MISSING = "-"
# The archived reasons (why) of jobs that failed; the failures page reads each, newest first.
FAILURE_WHYS = ("tried-too-many-times", "non-retriable-exception", "not-scheduled-by-retry-policy",
                "crashed-too-many-times", "crashed", "interrupted", "malformed", "bad-retry-policy", "unrunnable")
MESSAGE_CUT = 200




def as_json(value: object) -> str:
    return json.dumps(plain(value), indent=1, sort_keys=True)


def state_of(view: JobView) -> str:
    return f"archived: {view.why}" if view.state == "archived" else view.state


def parameters(view: JobView) -> object:
    workable = view.document.get("workable")
    return plain(workable.get("parameters")) if isinstance(workable, Mapping) else None


def executions(view: JobView) -> list[dict[str, Any]]:
    """Every attempt kept, oldest first, the newest with its trace and logs (``last_execution`` holds them)."""
    runs: list[Raw] = list(view.executions)
    last = view.last_execution
    if last is not None:
        if runs and runs[-1].get("attempt") == last.get("attempt"):
            runs[-1] = {**last, **{k: v for k, v in runs[-1].items() if v is not None}}
        elif not runs:
            runs = [last]
    return [_execution(run) for run in runs]


def _execution(run: Raw) -> dict[str, Any]:
    started, ended = run.get("started_at"), run.get("ended_at")
    took = (ended - started).total_seconds() if isinstance(started, datetime) and isinstance(ended, datetime) \
        else None
    return {
        "attempt": plain(run.get("attempt")), "outcome": _text(run.get("outcome")), "took_s": took,
        "worker": _text(run.get("worker")), "pid": _text(run.get("pid")), "hostname": _text(run.get("hostname")),
        "started_at": _text(plain(started)), "ended_at": _text(plain(ended)),
        "error": _str(run.get("class")), "message": _str(run.get("message")),
        "trace": _str(run.get("trace")), "logs": _str(run.get("logs")),
        "details_dropped": run.get("details_dropped") is True,
    }


def _text(value: object) -> str:
    return MISSING if value is None else str(value)


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def failure_of(view: JobView) -> tuple[str, str]:
    """The error class and the first line of the message of a job's latest attempt (``-`` when unknown)."""
    last = view.last_execution or (view.executions[-1] if view.executions else {})
    error, message = last.get("class"), last.get("message")
    first = (message.splitlines() or [""])[0][:MESSAGE_CUT] if isinstance(message, str) else ""
    if not isinstance(error, str) or not error:
        error = view.why or MISSING
    return error[:MESSAGE_CUT], first or (view.reason or "")[:MESSAGE_CUT]


@dataclass
class FailureGroup:
    """Jobs whose latest attempt failed with the same error class and message."""

    error: str
    message: str
    archived: list[JobView] = field(default_factory=list)  # retriable by a bulk retry
    retrying: list[JobView] = field(default_factory=list)  # waiting for their next attempt: a bulk cancel

    @property
    def count(self) -> int:
        return len(self.archived) + len(self.retrying)

    @property
    def newest(self) -> datetime | None:
        times = [t for t in (v.archived_at or v.created_at for v in (*self.archived, *self.retrying)) if t]
        return max(times) if times else None

    def ids(self, which: str) -> list[str]:
        return [str(plain(v.id)) for v in (self.archived if which == "archived" else self.retrying)]

    def fields(self, which: str) -> list[tuple[str, str]]:
        """The hidden fields of a bulk action on the ``archived`` or ``retrying`` jobs of the group."""
        return [("back", "/failures"), *(("id", i) for i in self.ids(which))]


def group_failures(archived: Iterable[JobView], retrying: Iterable[JobView]) -> list[FailureGroup]:
    """Failed jobs grouped by (error class, message), the largest group first."""
    groups: dict[tuple[str, str], FailureGroup] = {}
    for view in archived:
        key = failure_of(view)
        groups.setdefault(key, FailureGroup(*key)).archived.append(view)
    for view in retrying:
        key = failure_of(view)
        groups.setdefault(key, FailureGroup(*key)).retrying.append(view)
    return sorted(groups.values(), key=lambda g: (-g.count, g.error, g.message))


@dataclass(frozen=True)
class Point:
    """The cluster at one read of the overview's figures: what the live charts draw."""

    at: datetime
    ready: int
    running: int
    per_s: float  # jobs archived per second over the last minute
    wait_p95_s: float | None  # the highest of the groups' last-minute p95 wait


def point_of(at: datetime, groups: Sequence[Any]) -> Point:
    """A :class:`Point` from the groups of a :class:`recruiter.admin.Stats` (their first window is 1 min)."""
    ready = sum(g.depth.ready for g in groups)
    running = sum(g.depth.running + g.depth.assigned for g in groups)
    first = [g.windows[0] for g in groups if g.windows]
    waits = [w.wait_p95_s for w in first if w.wait_p95_s is not None]
    return Point(at, ready, running, sum(w.archived for w in first) / 60, max(waits) if waits else None)


def sparkline(values: Sequence[float | None], width: int = 240, height: int = 40) -> str:
    """The ``points`` of an SVG polyline drawing ``values`` left to right, scaled to the highest (None: skipped)."""
    known = [v for v in values if v is not None]
    if len(values) < 2 or not known:
        return ""
    top = max(known) or 1.0
    step = width / (len(values) - 1)
    return " ".join(f"{i * step:.1f},{height - (v / top) * (height - 2) - 1:.1f}"
                    for i, v in enumerate(values) if v is not None)


def age(seconds: float | None) -> str:
    if seconds is None:
        return MISSING
    if seconds < 120:
        return f"{seconds:.1f}s"
    return f"{seconds / 60:.1f}m" if seconds < 7200 else f"{seconds / 3600:.1f}h"


def number(value: float | None, digits: int = 3) -> str:
    return MISSING if value is None else f"{value:.{digits}f}"


def percent(value: float | None) -> str:
    return MISSING if value is None else f"{value:.1%}"


def when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else MISSING


def halt(view: JobView) -> str | None:
    """Whether a job cancelled while its worker had it has stopped (``jobs show`` says the same)."""
    return halt_line(view.document, when)
