"""The shapes of the documents in the five collections, as TypedDicts.

A TypedDict here describes a document AFTER :mod:`recruiter.domain.documents`
has checked it: the store reads a raw ``Mapping[str, object]``, the reader
returns a reason or lets it through, and from then on code may rely on these
types (``job["attempts"]`` is an ``int``, ``job["tenant"]`` a ``str`` or
``None``). Nothing in this module runs; it is types only.

Invariant: a field listed without ``NotRequired`` is present in every
well-formed document of that kind (the reader checks exactly those); the
``NotRequired`` ones appear in some states only (``lock_token`` while a job is
locked, ``outcome`` while a roster entry holds one).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Literal, NotRequired, TypedDict

from bson import ObjectId

# A document as the driver hands it over, before the reader has looked at it.
Raw = Mapping[str, object]
# Filters, projections and update documents sent to the server.
Query = dict[str, object]

JobStatus = Literal["queued", "retrying", "assigned"]
Priority = Literal["high", "low"]


# "class" is a keyword, so the documents holding it use the functional form.
WorkableDocument = TypedDict("WorkableDocument", {"class": str, "parameters": dict[str, object]})
PolicyDocument = TypedDict("PolicyDocument", {"class": str, "parameters": dict[str, object]})


# One attempt, as kept in ``executions`` and ``last_execution`` (``Execution.to_document``);
# ``class``, ``message`` and ``trace`` describe the error of a failed attempt.
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
})


class JobDoc(TypedDict):
    """A document of ``scheduled`` (and, with ``why`` and ``archived_at``, of ``archived``)."""

    _id: ObjectId
    done: bool
    created_at: datetime
    scheduled_at: datetime
    locked: bool
    attempts: int
    crashes: int
    status: JobStatus
    group: str
    tags: list[str]
    tenant: str | None
    priority: Priority
    workable: WorkableDocument
    retry_policy: PolicyDocument
    executions: list[ExecutionDoc]
    timeout_s: NotRequired[float | None]
    at_most_once: NotRequired[bool]
    last_execution: NotRequired[ExecutionDoc]
    lock_token: NotRequired[str]
    locked_by: NotRequired[str]
    locked_at: NotRequired[datetime]
    lock_epoch: NotRequired[int]
    crash_pending: NotRequired[bool]
    returned: NotRequired[int]
    unproven_returns: NotRequired[int]
    last_return: NotRequired[datetime]
    why: NotRequired[str]
    reason: NotRequired[str]
    archived_at: NotRequired[datetime]


class DecisionDoc(TypedDict, total=False):
    """A retry decision in an outcome: ``archive`` (why) or ``retry_at`` (and ``group``)."""

    archive: str
    reason: str
    retry_at: datetime
    group: str


class OutcomeDoc(TypedDict):
    """What a worker recorded for one assignment, in its roster entry (``Outcome.to_document``)."""

    job: ObjectId
    token: str
    attempt: int
    executed: bool
    decision: DecisionDoc
    execution: ExecutionDoc | None
    result: object


class AssignedRef(TypedDict):
    """A big job handed out by reference: the worker reads it by ``_id`` and ``lock_token``."""

    _id: ObjectId
    lock_token: str
    not_copied: bool


class RosterEntryDoc(TypedDict):
    """A document of ``roster``: one worker slot."""

    _id: str
    work_on: list[str]
    available: bool
    available_since: datetime
    created_at: datetime
    pid: int
    hostname: str
    session: str
    heartbeat_interval_s: float
    assigned_to: NotRequired[dict[str, ObjectId]]
    job: NotRequired[JobDoc | AssignedRef]
    outcome: NotRequired[OutcomeDoc]
    stopping: NotRequired[bool]
    stop_requested: NotRequired[bool]
    recovering: NotRequired[bool]


class HeartbeatDoc(TypedDict):
    """A document of ``heartbeats``: when a slot was last seen, and what it is running."""

    _id: str
    session: str
    last_seen_at: datetime
    fresh_until: datetime
    heartbeat_interval_s: float
    pid: int
    hostname: str
    working: bool
    working_on: ObjectId | None
    working_token: str | None
    working_since: datetime | None
