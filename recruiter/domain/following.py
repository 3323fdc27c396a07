"""Where a job is, told from the documents that describe it: :func:`view_of`.

A job is in ``scheduled`` until it ends, then in ``archived``; while a worker
runs it, that worker's heartbeat document names it. :func:`view_of` turns the
three (any may be missing) into one :class:`JobView`, the value that job
handles (:mod:`recruiter.producer.handles`) and ``recruiter jobs show`` present.

States, in the order a job passes through them:

- ``queued``: waiting for its first attempt and due;
- ``delayed``: waiting for its first attempt, due later (``scheduled_at``);
- ``retrying``: an attempt failed or crashed; waiting for the next one;
- ``assigned``: locked by the recruiter and handed to a worker;
- ``running``: assigned, and the worker's heartbeat shows it running;
- ``archived``: finished; ``why`` says how (``done``, ``cancelled``, ...).

Invariant: pure and total. The documents are untrusted (any writer may have
put anything there): a field of the wrong type reads as absent, so a view is
always built and nothing here raises on data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, cast

from recruiter.domain.dependencies import is_held, parse_after
from recruiter.domain.records import Raw
from recruiter.domain.refused import Refused, refused_of

JobState = Literal["queued", "delayed", "retrying", "assigned", "running", "archived"]
STATES: tuple[JobState, ...] = ("queued", "delayed", "retrying", "assigned", "running", "archived")
# The states a job in ``scheduled`` may be in (all but ``archived``).
WAITING_STATES: tuple[JobState, ...] = ("queued", "delayed", "retrying", "assigned", "running")
DONE = "done"


@dataclass(frozen=True)
class Progress:
    """A running job's latest ``ctx.progress``: a fraction (0 to 1) and/or a message, and when."""

    value: float | None
    message: str | None
    at: datetime | None

    def describe(self) -> str:
        """``40% copied 4 of 10 files`` (either part may be missing)."""
        parts = [] if self.value is None else [f"{self.value * 100:.0f}%"]
        if self.message:
            parts.append(self.message)
        return " ".join(parts) or "-"


@dataclass(frozen=True)
class JobView:
    """One job as its documents tell it (see the module doc for the states)."""

    id: object
    state: JobState
    why: str | None = None  # archived jobs: done, cancelled, tried-too-many-times, ...
    reason: str | None = None  # archived jobs: a detail of ``why``, when there is one
    group: str | None = None
    tenant: str | None = None
    tags: tuple[str, ...] = ()
    class_name: str | None = None
    attempts: int = 0
    created_at: datetime | None = None
    scheduled_at: datetime | None = None
    archived_at: datetime | None = None
    worker: str | None = None  # assigned or running: the worker slot holding it
    progress: Progress | None = None  # running: the job's latest progress, if it said any
    executions: tuple[Raw, ...] = ()  # oldest first, as stored
    last_execution: Raw | None = None
    result: object = None
    # archived done: the value was not kept, and why: {reason, size_bytes} (recruiter.domain.handback)
    result_dropped: Raw | None = None
    retry_of: object = None  # a copy made by ``jobs retry``: the archived job it copies
    # Workers that gave it back unrun, why and what to do (recruiter.domain.refused); ``current``: it waits for that.
    refused: Refused | None = None
    retried_as: object = None  # an archived job retried by ``jobs retry``: its copy
    # Enqueued with .after(...) and still held: the jobs it waits for that have not ended (domain.dependencies).
    waiting_for: tuple[object, ...] | None = None
    # How many: ``len(waiting_for)``, or for one stored with edges its count left (``waiting_for`` is then
    # the front of them its read found, recruiter.domain.edges).
    waiting_count: int | None = None
    document: Raw = field(default_factory=dict, repr=False)  # the document the view was built from

    @property
    def finished(self) -> bool:
        return self.state == "archived"

    @property
    def succeeded(self) -> bool:
        return self.state == "archived" and self.why == DONE


def _dropped(value: object) -> Raw | None:
    """``result_dropped`` as read (any value a hand-written document holds): a document, or None."""
    if value is None:
        return None
    return cast(Raw, value) if isinstance(value, Mapping) else {"reason": f"result_dropped: {str(value)[:200]}"}


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _date(value: object) -> datetime | None:
    return value if isinstance(value, datetime) else None


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return 0
    return int(value) if abs(value) < 2**63 else 0


def _documents(value: object) -> tuple[Raw, ...]:
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        return ()
    return tuple(cast(Raw, v) for v in value if isinstance(v, Mapping))


def _tags(value: object) -> tuple[str, ...]:
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        return ()
    return tuple(t for t in value if isinstance(t, str))


def progress_of(beat: Raw | None, job: Raw) -> Progress | None:
    """The progress ``beat`` (a heartbeat document) reports for ``job``, if it runs it."""
    if beat is None or not running_in(beat, job):
        return None
    doc = beat.get("progress")
    if not isinstance(doc, Mapping):
        return None
    value = doc.get("value")
    fraction = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    if fraction is not None and not 0.0 <= fraction <= 1.0:
        fraction = None  # NaN, or out of range: not shown
    return Progress(fraction, _str(doc.get("message")), _date(doc.get("at")))


def running_in(beat: Raw, job: Raw) -> bool:
    """Whether the heartbeat ``beat`` shows ``job``'s current attempt running (same job, same lock)."""
    return (job.get("locked") is True and beat.get("working_on") == job.get("_id")
            and beat.get("working_token") is not None and beat.get("working_token") == job.get("lock_token"))


def _waiting_state(job: Raw, beat: Raw | None, now: datetime) -> JobState:
    if job.get("locked") is True:
        return "running" if beat is not None and running_in(beat, job) else "assigned"
    if job.get("status") == "retrying":
        return "retrying"
    due = _date(job.get("scheduled_at"))
    return "delayed" if due is not None and due > now else "queued"


def view_of(job_id: object, scheduled: Raw | None, archived: Raw | None, beat: Raw | None,
            now: datetime) -> JobView | None:
    """The view of job ``job_id`` from its documents; None if neither collection holds it.

    ``beat`` is the heartbeat document of the worker holding the job (if any).
    A job found in both collections (a round archiving it has written the copy,
    not yet deleted the original) is archived: the copy is what it ends as.
    """
    doc = archived if archived is not None else scheduled
    if doc is None:
        return None
    workable = doc.get("workable")
    last = doc.get("last_execution")
    common = {
        "id": job_id, "group": _str(doc.get("group")), "tenant": _str(doc.get("tenant")),
        "tags": _tags(doc.get("tags")),
        "class_name": _str(workable.get("class")) if isinstance(workable, Mapping) else None,
        "attempts": _count(doc.get("attempts")), "created_at": _date(doc.get("created_at")),
        "scheduled_at": _date(doc.get("scheduled_at")), "executions": _documents(doc.get("executions")),
        "last_execution": cast(Raw, last) if isinstance(last, Mapping) else None,
        "retry_of": doc.get("retry_of"), "document": doc, "refused": refused_of(doc, archived is not None),
    }
    if archived is not None:
        return JobView(state="archived", why=_str(archived.get("why")) or "?", reason=_str(archived.get("reason")),
                       retried_as=archived.get("retried_as"),
                       archived_at=_date(archived.get("archived_at")), result=archived.get("result"),
                       result_dropped=_dropped(archived.get("result_dropped")), **common)  # type: ignore[arg-type]
    assert scheduled is not None
    state = _waiting_state(scheduled, beat, now)
    holder = _str(scheduled.get("locked_by")) if scheduled.get("locked") is True else None
    if is_held(scheduled) and not isinstance(after := parse_after(scheduled.get("after"), scheduled.get("_id")), str):
        common.update(waiting_for=after.pending, scheduled_at=after.due_at,  # its own due time, once released
                      waiting_count=after.counted.left if after.counted is not None else len(after.pending))
    return JobView(state=state, worker=holder, progress=progress_of(beat, scheduled) if holder else None,
                   **common)  # type: ignore[arg-type]
