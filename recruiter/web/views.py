"""What the templates show, made from the read model's values: plain text, executions, failure groups.

Invariant: pure, and never raises on data. A view comes from untrusted documents
(parameters, results and executions are shown as stored), so every stored value
goes through :func:`plain` before a template sees it, and everything a template
prints goes through :func:`finalize` (control and bidirectional characters escaped,
long values cut: :mod:`recruiter.domain.visible`), then Jinja's autoescape.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from markupsafe import Markup, escape

from recruiter.admin import OverviewQuery
from recruiter.admin.overview import DEFAULT_PAGE_SIZE
from recruiter.domain.cancel import halt_line
from recruiter.domain.dependencies import held_state
from recruiter.domain.following import JobView
from recruiter.domain.jsonable import plain as plain  # re-exported: the views speak of it
from recruiter.domain.patterns import message_pattern
from recruiter.domain.records import Raw
from recruiter.domain.visible import Cut, cut, visible

MISSING = "-"
# The archived reasons (why) of jobs that failed; the failures page reads each, newest first.
FAILURE_WHYS = ("tried-too-many-times", "non-retriable-exception", "not-scheduled-by-retry-policy",
                "crashed-too-many-times", "crashed", "interrupted", "malformed", "bad-retry-policy", "unrunnable",
                "snoozed-too-often")
MESSAGE_CUT = 200


def finalize(value: object) -> object:
    """What a template prints of ``value`` (Jinja's ``finalize``: every ``{{ }}``, no opt-in).

    Text shows its control and bidirectional characters escaped (newline and tab kept:
    HTML shows them as space unless in ``<pre>``, logs and traces), cut at ``VALUE_BOUND``
    characters with what was cut said. Markup (a macro's output, :func:`exact`) is left as it is.
    """
    if isinstance(value, Markup) or not isinstance(value, str):
        return value
    shown = cut(value)
    text = visible(shown.text, multiline=True)
    return f"{text} … [{shown.note()}]" if shown.cut else text


def exact(value: object) -> Markup:
    """``value`` escaped for HTML but otherwise as read: a form's hidden field, sent back to act on that very name."""
    return escape(value)


def shown(value: object) -> Cut:
    """A long value as the job page shows it: its first ``VALUE_BOUND`` characters, and the size of the whole."""
    return cut(value if isinstance(value, str) else as_json(value))


def as_json(value: object) -> str:
    return json.dumps(plain(value), indent=1, sort_keys=True)


def state_of(view: JobView) -> str:
    """As ``jobs list`` says it: a job workers gave back unrun names them and why."""
    if view.state == "archived":
        return f"archived: {view.why}"
    if view.waiting_for is not None:  # .after(...): held until they end
        return held_state(view.waiting_for, view.waiting_count)
    return f"{view.state} ({view.refused.short()})" if view.refused is not None and view.refused.current \
        else view.state


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
    if view.refused is not None and view.refused.current:  # given back unrun: no attempt to tell of
        refused = view.refused
        return f"refused: {refused.label}", f"{refused.reason[:MESSAGE_CUT]}; to fix: {refused.fix}"
    last = view.last_execution or (view.executions[-1] if view.executions else {})
    error, message = last.get("class"), last.get("message")
    # Its first line, split at newlines only: str.splitlines would also end it at VT, FF or U+2028, hiding the rest.
    first = message.split("\n", 1)[0].rstrip("\r")[:MESSAGE_CUT] if isinstance(message, str) else ""
    if not isinstance(error, str) or not error:
        error = view.why or MISSING
    return error[:MESSAGE_CUT], first or (view.reason or "")[:MESSAGE_CUT]


@dataclass
class FailureGroup:
    """Jobs whose latest attempt failed with the same error class and message."""

    error: str
    message: str  # the pattern of the messages, or the message (grouped exactly)
    example: str = ""  # the first message as it was, for a pattern
    archived: list[JobView] = field(default_factory=list)  # retriable by a bulk retry
    retrying: list[JobView] = field(default_factory=list)  # waiting for their next attempt: a bulk cancel

    @property
    def count(self) -> int:
        return len(self.archived) + len(self.retrying)

    @property
    def newest(self) -> datetime | None:
        times = [t for t in (v.archived_at or v.created_at for v in (*self.archived, *self.retrying)) if t]
        return max(times) if times else None

    @property
    def retriable(self) -> list[JobView]:
        """The archived jobs not retried yet (one retried already has its copy: retrying it again would not copy it)."""
        return [v for v in self.archived if v.retried_as is None]

    def ids(self, which: str) -> list[str]:
        chosen = {"archived": self.archived, "retriable": self.retriable}.get(which, self.retrying)
        return [str(plain(v.id)) for v in chosen]

    def fields(self, which: str) -> list[tuple[str, str]]:
        """The hidden fields of a bulk action on the ``archived``, ``retriable`` or ``retrying`` jobs of the group."""
        return [("back", "/failures"), *(("id", i) for i in self.ids(which))]


def group_failures(archived: Iterable[JobView], retrying: Iterable[JobView], *, exact: bool = False
                   ) -> list[FailureGroup]:
    """Failed jobs grouped by error class and message pattern (numbers, ids, quoted values masked:
    :func:`recruiter.domain.patterns.message_pattern`), or with ``exact`` by the message as it is;
    the largest group first."""
    groups: dict[tuple[str, str], FailureGroup] = {}
    for jobs, which in ((archived, "archived"), (retrying, "retrying")):
        for view in jobs:
            error, message = failure_of(view)
            key = (error, message if exact else message_pattern(message))
            group = groups.setdefault(key, FailureGroup(*key, example=message))
            (group.archived if which == "archived" else group.retrying).append(view)
    return sorted(groups.values(), key=lambda g: (-g.count, g.error, g.message))


@dataclass(frozen=True)
class OverviewLinks:
    """The overview's links, keeping its query (filter, page size, page, tenants shown, @worker: groups) but
    what a link changes: ``href(page=2)``, ``href(tenants="billing")``, ``href(tenants=None)``."""

    query: OverviewQuery

    def params(self, **changes: object) -> list[tuple[str, str]]:
        q = self.query
        values: dict[str, object] = {"q": q.name, "size": q.size, "page": q.page, "tenants": q.tenants_of,
                                     "workers": 1 if q.worker_groups else None}
        values.update(changes)
        defaults: dict[str, object] = {"size": DEFAULT_PAGE_SIZE, "page": 1}  # left out: shorter links
        return [(k, str(v)) for k, v in values.items() if v is not None and v is not False and v != defaults.get(k)]

    def __call__(self, path: str = "/", **changes: object) -> str:
        query = urlencode(self.params(**changes))
        return f"{path}?{query}" if query else path


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


def sparkline(values: Sequence[float | None], width: int = 240, height: int = 40) -> Markup:
    """The ``points`` of an SVG polyline drawing ``values`` left to right, scaled to the highest (None: skipped).

    Markup (numbers only), so :func:`finalize` never cuts a long one.
    """
    known = [v for v in values if v is not None]
    if len(values) < 2 or not known:
        return Markup("")
    top = max(known) or 1.0
    step = width / (len(values) - 1)
    return Markup(" ").join(f"{i * step:.1f},{height - (v / top) * (height - 2) - 1:.1f}"
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
