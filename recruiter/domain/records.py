"""The shapes of the documents in the collections, as TypedDicts.

A TypedDict here describes a document AFTER :mod:`recruiter.domain.documents`
has checked it: the store reads a raw ``Mapping[str, object]`` (:data:`Raw`),
the checker returns a reason or the same document typed
(:func:`~recruiter.domain.documents.checked_job` gives a :class:`JobDoc`), and
from then on code may rely on these types (``job["attempts"]`` is a count,
``job["group"]`` a ``str``). Nothing in this module runs; it is types only.

Invariant: a field listed without ``NotRequired`` is one the checker requires,
so it is present in every document that passed; the ``NotRequired`` ones appear
in some states only (``lock_token`` while a job is locked, ``outcome`` while a
roster entry holds one), in documents an older version wrote, or not in a
reader's projection. Each shape was checked against its writer
(``build_job_document`` and the recruiter's lock, ``Execution.to_document``,
``Outcome.to_document``, the worker's roster document, ``heartbeat_document``).
A count (``attempts``, ``crashes``) is a whole number; one a shell wrote may
be a whole float (``3.0``), which the checker accepts and arithmetic treats
alike.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal, NotRequired, TypedDict

from bson import ObjectId

# A document as the driver hands it over, before the checker has looked at it.
Raw = Mapping[str, object]
# Filters, projections and update documents sent to the server.
Query = dict[str, object]

# What the checker accepts as a job's ``_id`` (documents.job_id): the producer writes ObjectIds;
# other writers may use strings, numbers, UUIDs, dates or binaries (bson.Binary is a bytes).
JobId = ObjectId | str | int | bytes | uuid.UUID | datetime

JobStatus = Literal["queued", "retrying", "assigned"]
Priority = Literal["high", "low"]


# "class" is a keyword, so the documents holding it use the functional form.
WorkableDocument = TypedDict("WorkableDocument", {
    "class": str,
    "parameters": NotRequired[Mapping[str, object] | None],
    "method": NotRequired[str | None],
})
PolicyDocument = TypedDict("PolicyDocument", {
    "class": str,
    "parameters": NotRequired[Mapping[str, object] | None],
})


# One attempt, as kept in ``executions`` and ``last_execution`` (``Execution.to_document``);
# ``class``, ``message`` and ``trace`` describe the error of a failed attempt (``message`` alone
# says why an attempt was interrupted). Only the newest DETAILED_EXECUTIONS_KEPT entries of
# ``executions`` keep ``trace`` and ``logs``; older ones lose them and say ``details_dropped``.
ExecutionDoc = TypedDict("ExecutionDoc", {
    "attempt": int,
    "outcome": str,
    "scheduled_at": datetime | None,
    "assigned_at": datetime | None,
    "started_at": datetime | None,
    "ended_at": datetime,
    "worker": str,
    "pid": int | None,
    "hostname": str | None,
    "crashed": bool,
    "class": NotRequired[str],
    "message": NotRequired[str | None],
    "trace": NotRequired[str | None],
    # What the job logged during this attempt (logging, structlog, print), the newest
    # MAX_LOG_BYTES of it; ``logs_cut``: how many bytes were dropped before it (0: none).
    "logs": NotRequired[str],
    "logs_cut": NotRequired[int],
    "details_dropped": NotRequired[bool],
})


class LastExecutionDoc(TypedDict, total=False):
    """``last_execution`` as the checker vouches for it: the fields the processes read.

    Written as a whole :data:`ExecutionDoc`; an older or hand-written one may lack any field.
    """

    attempt: int | None
    scheduled_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    message: str | None


class LastReturnDoc(TypedDict):
    """``last_return``: the latest time a dead worker's job was put back unstarted (``liveness.return_update``)."""

    worker: str
    pid: int | None
    hostname: str | None
    assigned_at: datetime | None
    returned_at: datetime
    reason: str


class UniqueDoc(TypedDict):
    """``unique``: the key, its scope (unfinished | period | forever) and, for a period, its end."""

    key: str
    scope: str
    until: NotRequired[datetime]


class ResubmitDoc(TypedDict):
    """``resubmit``: set on a locked job by ``rec.resubmit``; when its attempt ends it runs
    once more, at ``at`` (None: at once). Removed with the lock (outcome.LOCK_FIELDS)."""

    at: datetime | None
    requested_at: datetime


class OnWorkerDoc(TypedDict, total=False):
    """``on_worker``: the worker id, the group the job was enqueued in, and the time after which
    it is archived unless started (absent: none). Read tolerantly: it may lack any field."""

    worker: str
    group: str
    deadline: datetime


class ScheduleRefDoc(TypedDict):
    name: str
    slot: datetime


class JobFields(TypedDict):
    """What a job document holds in ``scheduled`` and in ``archived`` alike."""

    _id: JobId
    group: str
    locked: bool
    priority: Priority
    scheduled_at: datetime
    created_at: datetime
    attempts: int
    workable: WorkableDocument
    retry_policy: PolicyDocument
    # Written by every producer of this version; an older document may lack them.
    tenant: NotRequired[str | None]
    crashes: NotRequired[int]
    done: NotRequired[bool]
    tags: NotRequired[list[str]]
    executions: NotRequired[list[ExecutionDoc]]
    timeout_s: NotRequired[float | None]
    at_most_once: NotRequired[bool]
    # Snoozes (recruiter.domain.snooze): the cap the job was given, and how many it took.
    max_snoozes: NotRequired[int]
    snoozes: NotRequired[int]
    last_execution: NotRequired[LastExecutionDoc | None]
    # Returns of a dead worker's unstarted job (recruiter.domain.liveness).
    unproven_returns: NotRequired[int]
    last_return: NotRequired[LastReturnDoc]
    # A job put back in the queue by ``recruiter jobs retry``: the archived job it copies.
    retry_of: NotRequired[JobId]
    # A unique job's key (recruiter.domain.unique); kept when it is archived.
    unique: NotRequired[UniqueDoc]
    # How many resubmits were applied to it (recruiter.domain.resubmit): each gave it one more run.
    resubmits: NotRequired[int]
    # A job aimed at one worker (recruiter.domain.placement): its ``group`` is that worker's
    # reserved group; this holds the worker id, the group it was enqueued in, its deadline.
    on_worker: NotRequired[OnWorkerDoc]
    # An occurrence of a periodic job (recruiter.domain.schedules): its schedule and slot.
    schedule: NotRequired[ScheduleRefDoc]
    # The W3C trace context of the enqueue ({traceparent, tracestate?}: recruiter.tracing). Not
    # checked by the job's checker: the worker reads it tolerantly and ignores a malformed one.
    trace_context: NotRequired[object]
    after: NotRequired[dict[str, object]]  # the jobs it waits for (recruiter.domain.dependencies)


class JobDoc(JobFields):
    """A document of ``scheduled``.

    The fields the lock adds (``locked_by``, ``lock_token``, ``locked_at``, ``lock_epoch``)
    are present exactly when ``locked`` is true; ``status`` is then ``assigned``.
    """

    status: JobStatus
    lock_token: NotRequired[ObjectId]
    locked_by: NotRequired[str]
    locked_at: NotRequired[datetime]
    lock_epoch: NotRequired[int]
    crash_pending: NotRequired[bool]
    resubmit: NotRequired[ResubmitDoc]


class ArchivedJobDoc(JobFields):
    """A document of ``archived`` written by ``outcome.archived_document``: the job, unlocked,
    without ``status`` and the lock, with why it ended (``done`` is ``why == "done"``).

    A quarantined job (``why: "malformed"``, :mod:`recruiter.domain.quarantine`) is archived
    as it was found, so it may match none of this.
    """

    why: str
    archived_at: datetime
    reason: NotRequired[str]
    result: NotRequired[object]
    # Set once, by the transaction that inserts its copy (recruiter.store.retries): the copy's
    # id and when. The only fields written on an archived job after it is archived.
    retried_as: NotRequired[JobId]
    retried_at: NotRequired[datetime]


class DecisionDoc(TypedDict, total=False):
    """A retry decision in an outcome: ``archive`` (why, maybe a ``reason``) or ``retry_at`` (maybe a ``group``)."""

    archive: str
    reason: str | None
    retry_at: datetime
    group: str | None


class OutcomeDoc(TypedDict):
    """What a worker recorded for one assignment, in its roster entry (``Outcome.to_document``).

    ``execution`` is checked as an embedded document only: it is copied into the
    job, never read field by field.
    """

    job: JobId
    token: ObjectId
    executed: bool
    decision: DecisionDoc
    attempt: NotRequired[int]
    execution: NotRequired[ExecutionDoc | None]
    result: NotRequired[object]
    # A done job's value that was not stored: {reason, size_bytes} (recruiter.domain.handback).
    result_dropped: NotRequired[dict[str, object] | None]
    # The workflow steps a done attempt added, decided steps-not-added (recruiter.domain.added).
    steps: NotRequired[list[dict[str, object]]]


class AssignedRef(TypedDict):
    """A big job handed out by reference: the worker reads it by ``_id`` and ``lock_token``."""

    _id: JobId
    lock_token: ObjectId
    not_copied: bool


class ReleaseDoc(TypedDict):
    """The writer's release (recruiter.domain.versions.record): its version, the oldest it works beside."""

    version: str
    works_beside: str


class RosterEntryDoc(TypedDict):
    """A document of ``roster``: one worker slot.

    The worker writes ``work_on`` to ``heartbeat_interval_s`` when it registers; the
    readers project, so only ``_id`` is certain in a checked entry. ``work_on`` is
    present whenever ``available`` is true.
    """

    _id: str
    work_on: NotRequired[list[str]]
    available: NotRequired[bool]
    available_since: NotRequired[datetime | None]
    created_at: NotRequired[datetime]
    pid: NotRequired[int]
    hostname: NotRequired[str]
    session: NotRequired[ObjectId]
    heartbeat_interval_s: NotRequired[float]
    # An assignment (the recruiter's round): ``{worker id: job id}`` and the job or a reference.
    assigned_to: NotRequired[dict[str, JobId] | None]
    assigned_since: NotRequired[datetime]
    job: NotRequired[JobDoc | AssignedRef | None]  # null once a cancel took the job away
    outcome: NotRequired[OutcomeDoc | None]
    stopping: NotRequired[bool]
    stop_requested: NotRequired[bool]
    recovering: NotRequired[bool]
    # Written by older versions, which kept the heartbeat in the entry (now in ``heartbeats``).
    last_seen_at: NotRequired[datetime]
    working: NotRequired[bool]
    working_on: NotRequired[JobId | None]
    release: NotRequired[ReleaseDoc]  # from 0.2.0 on (recruiter.domain.versions)


class ProgressDoc(TypedDict):
    """What a running job last said of its progress (``ctx.progress``), carried by the heartbeat.

    ``value`` is a fraction from 0 to 1 when given; ``at`` is when the job said it.
    """

    value: float | None
    message: str | None
    at: datetime


class HeartbeatDoc(TypedDict):
    """A document of ``heartbeats``: when a slot was last seen, and what it is running.

    ``session`` is its roster entry's; ``working_token`` the lock token of the job it runs.
    """

    _id: str
    session: ObjectId
    last_seen_at: datetime
    fresh_until: datetime
    heartbeat_interval_s: float
    pid: int
    hostname: str
    working: bool
    working_on: JobId | None
    working_token: ObjectId | None
    working_since: datetime | None
    # The running job's latest ``ctx.progress``; None when idle or never said.
    progress: NotRequired[ProgressDoc | None]
    # The reserved group of the jobs aimed at this slot's process (recruiter.domain.placement):
    # the cleaner archives them ``worker-gone`` when it removes the last slot as dead.
    worker_group: NotRequired[str]
    release: NotRequired[ReleaseDoc]  # from 0.2.0 on (recruiter.domain.versions)


class CatchUpDoc(TypedDict):
    mode: Literal["none", "all", "within"]
    limit: int
    within_s: float | None


class LastFireDoc(TypedDict):
    slot: datetime
    job: JobId
    at: datetime


class LastSkipDoc(TypedDict):
    slot: datetime
    reason: Literal["overlap", "catch-up"]
    at: datetime


class ScheduleDoc(TypedDict):
    """A document of ``schedules`` (recruiter.domain.schedules), ``_id`` the schedule's name.

    Exactly one of ``cron`` and ``every_s`` is set; ``job`` is a built job document without
    ``_id``, ``created_at``, ``scheduled_at`` and ``unique`` (each occurrence gets its own).
    ``next_fire_at`` (the next slot with its jitter) is null while paused."""

    _id: str
    cron: str | None
    every_s: float | None
    tz: str
    job: dict[str, Any]
    overlap: Literal["skip", "allow"]
    catch_up: CatchUpDoc
    jitter_s: float
    paused: bool
    version: str
    created_at: datetime
    updated_at: datetime
    declared_at: datetime
    next_fire_at: datetime | None
    next_slot: datetime | None
    last_fire: LastFireDoc | None
    skipped: int
    last_skip: LastSkipDoc | None
    run_now: datetime | None
