"""The events the processes emit: one vocabulary for logs, metrics, round timings and users' hooks.

Each event is a frozen value saying something that has become true: it is emitted
after the write that makes it true (the outcome write for a finished job, the
round's commit for a job archived by the recruiter, the lease write for a lease
won), never before, and never for a write that did not land. Subscribers receive
them through :class:`recruiter.processes.events.Bus`; the structlog subscriber
prints the log lines the processes always printed, under the same names.

Invariant: pure values, no I/O; times in seconds (``_s``) or aware UTC datetimes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class JobStarted:
    """A worker slot started running a job (its assignment read, its ``started`` mark written if held ahead)."""

    worker_id: str
    job_id: object
    group: str | None
    tenant: str | None
    class_name: str | None
    attempt: object
    started_at: datetime
    wait_s: float | None  # from the time it was due (``scheduled_at``) to its start


@dataclass(frozen=True)
class JobFinished:
    """An attempt ran and its outcome is recorded (the worker's outcome write landed).

    ``outcome`` is ``done``, ``failed`` or ``timed-out``; ``decision`` what the retry
    policy made of a failure (``archive: tried-too-many-times``, ``retry at ...``).
    ``exception`` is the exception the job raised, with its ``__traceback__``, in the
    worker process that ran it (None when it ran in a child process: ``trace`` holds its text).
    """

    worker_id: str
    job_id: object
    group: str | None
    tenant: str | None
    class_name: str | None
    attempt: object
    outcome: str
    duration_s: float
    decision: str | None = None
    error: str | None = None  # the exception's class name
    message: str | None = None
    trace: str | None = None
    exception: BaseException | None = field(default=None, compare=False)

    @property
    def failed(self) -> bool:
        return self.outcome != "done"


@dataclass(frozen=True)
class JobArchived:
    """A job reached ``archived`` (the round, or the cleaner's write, committed); ``by`` says which process."""

    job_id: object
    why: str
    attempts: object
    group: str | None
    by: str  # recruiter | cleaner
    reason: str | None = None
    # The workflow the job is a step of, by name (recruiter.domain.workflow.workflow_name: "(malformed)"
    # for a malformed stored tag); None: not a step.
    workflow: str | None = None


@dataclass(frozen=True)
class OutcomeApplied:
    """The leader's round that applied a job's outcome committed (archived, rescheduled or resubmitted).

    ``kind`` is the attempt's outcome (``done``, ``failed``, ``timed-out``, ...; ``judged`` for a
    crashed job not run again), ``wait_s`` the time from when it was due to its start (None when
    it did not start); ``at`` the round's time. The history over time counts these
    (:mod:`recruiter.domain.timeline`)."""

    group: str | None
    kind: str
    wait_s: float | None
    at: datetime


@dataclass(frozen=True)
class RoundCommitted:
    """A recruiter round's transaction committed: its sizes, its time, and that time by phase."""

    assigned: int
    applied: int
    free_workers: int
    duration_s: float
    phases: Mapping[str, float]


@dataclass(frozen=True)
class RoundIdle:
    """A round whose reads found nothing to write: nothing was committed."""

    duration_s: float
    phases: Mapping[str, float]


@dataclass(frozen=True)
class RoundAbandoned:
    """A round begun that raised before committing (a conflict, a lost lease): nothing it did happened."""

    error: str


@dataclass(frozen=True)
class WorkerRegistered:
    worker_id: str
    groups: tuple[str, ...]
    pid: int


@dataclass(frozen=True)
class WorkerGone:
    """A roster entry left: ``deregistered`` by its worker, or removed ``dead`` by the cleaner."""

    worker_id: str
    reason: str  # deregistered | dead
    last_seen: str | None = None  # for a dead one: when it was last seen (ISO 8601), or why never
    pid: object = None
    hostname: object = None


@dataclass(frozen=True)
class LeaseWon:
    """A leader took its lease (the lease write landed); ``epoch`` is its fencing token."""

    role: str  # recruiter | cleaner
    epoch: int | None
    owner: str


@dataclass(frozen=True)
class LeaseLost:
    """A leader found its lease no longer held (expired, or taken by a successor): it stands by."""

    role: str
    epoch: int | None


Event = (JobStarted | JobFinished | JobArchived | OutcomeApplied | RoundCommitted | RoundIdle | RoundAbandoned
         | WorkerRegistered | WorkerGone | LeaseWon | LeaseLost)
