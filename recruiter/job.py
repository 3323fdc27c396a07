"""Pure job-document building, shared by the sync and asyncio producers.

``build_job_document`` is the only place a ``scheduled`` document is born. It
validates everything a user can get wrong before anything is written, so a bad
job is refused at enqueue with a clear error instead of failing in a worker.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import bson
from bson import ObjectId
from bson.errors import InvalidDocument

from recruiter.clock import utc
from recruiter.retry import DoNotDoItAgain, RetryPolicy, policy_to_document
from recruiter.workable import Workable

DEFAULT_GROUP = "generic"
MAX_EXECUTIONS_KEPT = 20
# The largest job document enqueue accepts: MongoDB's 16 MiB less room for what the
# job gains on its way (lock fields, MAX_EXECUTIONS_KEPT executions with their
# messages, the last trace, a result: recruiter.attempt caps each), so that its lock
# and its archived copy still fit.
MAX_JOB_BYTES = 16 * 1024 * 1024 - 256 * 1024


class Status(StrEnum):
    """Where a job in ``scheduled`` is. ``archived`` documents carry ``why`` instead."""

    QUEUED = "queued"  # waiting for its first attempt (maybe not due yet)
    RETRYING = "retrying"  # a previous attempt failed or crashed; waiting for the next
    ASSIGNED = "assigned"  # locked by the recruiter and given to one worker


class Priority(StrEnum):
    HIGH = "high"
    LOW = "low"


class JobRefused(ValueError):
    """The job cannot be enqueued as given; nothing was written."""


@dataclass(frozen=True)
class JobOptions:
    """Everything about a job except its workable."""

    group: str | None = None
    tags: tuple[str, ...] = ()
    scheduled_at: datetime | None = None
    schedule_in: timedelta | None = None
    retry_policy: RetryPolicy | None = None
    tenant: str | None = None
    priority: Priority = Priority.LOW
    timeout_s: float | None = None


def _check_name(kind: str, value: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise JobRefused(f"{kind} must be a non-empty string, got {value!r}")
    if value == "*":
        raise JobRefused(f"{kind} '*' is reserved for workers that take any group")
    return value


def build_job_document(
    workable: Workable,
    options: JobOptions,
    now: datetime,
    job_id: ObjectId | None = None,
) -> dict[str, Any]:
    """The ``scheduled`` document for ``workable`` enqueued at ``now``.

    Raises :class:`JobRefused` when the workable, its parameters or the options
    cannot be stored.
    """
    if not isinstance(workable, Workable):
        raise JobRefused(f"only recruiter.Workable instances can be enqueued, got {type(workable).__name__}")
    try:
        workable_doc = workable.to_document()
    except TypeError as exc:
        raise JobRefused(str(exc)) from exc
    # An explicit group is checked as given: in_group("") is an error, not the default.
    group = options.group if options.group is not None else type(workable).group or DEFAULT_GROUP
    group = _check_name("group", group)
    policy = options.retry_policy or type(workable).retry_policy or DoNotDoItAgain()
    if not isinstance(policy, RetryPolicy):
        raise JobRefused(f"retry policy must be a recruiter.retry.RetryPolicy, got {policy!r}")
    now = utc(now)
    if options.scheduled_at is not None:
        scheduled_at = utc(options.scheduled_at)
    elif options.schedule_in is not None:
        scheduled_at = utc(now + options.schedule_in)
    else:
        scheduled_at = now
    timeout_s = options.timeout_s if options.timeout_s is not None else getattr(type(workable), "timeout_s", None)
    if timeout_s is not None and not (isinstance(timeout_s, int | float) and timeout_s > 0):
        raise JobRefused(f"timeout must be a positive number of seconds, got {timeout_s!r}")
    for tag in options.tags:
        _check_name("tag", tag)
    doc: dict[str, Any] = {
        "_id": job_id or ObjectId(),
        "done": False,
        "created_at": now,
        "scheduled_at": scheduled_at,
        "locked": False,
        "attempts": 0,
        "crashes": 0,
        "status": Status.QUEUED.value,
        "group": group,
        "tags": list(options.tags),
        "tenant": None if options.tenant is None else _check_name("tenant", options.tenant),
        "priority": Priority(options.priority).value,
        "workable": workable_doc,
        "retry_policy": policy_to_document(policy),
        "executions": [],
    }
    if timeout_s is not None:
        doc["timeout_s"] = float(timeout_s)
    try:
        size = len(bson.encode(doc))
    except (InvalidDocument, TypeError, OverflowError) as exc:
        raise JobRefused(
            f"cannot store the parameters of {workable_doc['class']} in MongoDB: {exc}"
        ) from None
    if size > MAX_JOB_BYTES:
        raise JobRefused(
            f"the job document of {workable_doc['class']} would be {size} bytes, over the {MAX_JOB_BYTES} byte "
            f"limit (MongoDB's 16 MiB less room for its lock and execution history)"
        )
    return doc


@dataclass(frozen=True)
class JobBuilder:
    """Fluent, immutable description of one job; ``enqueue()`` writes it.

    ``enqueue()`` returns the job id for a sync :class:`~recruiter.Recruiter`
    and an awaitable of it for an :class:`~recruiter.AsyncRecruiter`.
    """

    workable: Workable
    recruiter: Any = field(repr=False)
    options: JobOptions = JobOptions()

    def _with(self, **changes: Any) -> JobBuilder:
        return dataclasses.replace(self, options=dataclasses.replace(self.options, **changes))

    def in_group(self, group: str) -> JobBuilder:
        return self._with(group=group)

    def tagged(self, *tags: str) -> JobBuilder:
        return self._with(tags=self.options.tags + tuple(tags))

    def schedule_at(self, when: datetime) -> JobBuilder:
        return self._with(scheduled_at=when, schedule_in=None)

    def schedule_in(self, delta: timedelta | None = None, **units: float) -> JobBuilder:
        """Delay the job by ``delta`` or by ``timedelta(**units)``, e.g. ``schedule_in(minutes=5)``."""
        delay = (delta or timedelta()) + timedelta(**units)
        if delay < timedelta():
            raise JobRefused(f"schedule_in needs a non-negative delay, got {delay}")
        return self._with(schedule_in=delay, scheduled_at=None)

    def retry_with(self, policy: RetryPolicy) -> JobBuilder:
        return self._with(retry_policy=policy)

    def for_tenant(self, tenant: str) -> JobBuilder:
        return self._with(tenant=tenant)

    def with_priority(self, priority: str) -> JobBuilder:
        try:
            return self._with(priority=Priority(priority))
        except ValueError:
            raise JobRefused(f"priority must be 'high' or 'low', got {priority!r}") from None

    def with_timeout(self, seconds: float) -> JobBuilder:
        return self._with(timeout_s=seconds)

    def build(self, now: datetime) -> dict[str, Any]:
        return build_job_document(self.workable, self.options, now)

    def enqueue(self) -> Any:
        return self.recruiter.enqueue(self)


def as_builder(item: JobBuilder | Workable, recruiter: Any) -> JobBuilder:
    if isinstance(item, JobBuilder):
        return item
    if isinstance(item, Workable):
        return JobBuilder(item, recruiter)
    raise JobRefused(f"expected a Workable or a job builder, got {type(item).__name__}")
