"""The job builder: the fluent, typed way to give one job its options and enqueue it.

``SendInvoice("INV-1").as_job_of(rec).in_group("billing").schedule_in(minutes=5).enqueue()``:
each step returns a new builder; ``enqueue()`` returns what its recruiter's ``enqueue`` returns
(a :class:`~recruiter.JobHandle`, or for an :class:`~recruiter.AsyncRecruiter` an awaitable of an
:class:`~recruiter.AsyncJobHandle`), typed through the builder's parameter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, Protocol, TypeVar

from recruiter.domain.dependencies import MAX_DEPENDENCIES, DependencyRefused, checked_ids, checked_if_failed
from recruiter.domain.dependency_policy import PolicyRefused, checked_policy
from recruiter.domain.job import (
    JobOptions,
    JobRefused,
    Priority,
    build_job_document,
    check_policy,
    check_timeout,
    checked_max_snoozes,
    checked_name,
    checked_priority,
    checked_tag,
    unique_of,
)
from recruiter.domain.placement import deadline_at, worker_id_problem
from recruiter.domain.retry import RetryPolicy
from recruiter.domain.unique import Unique, UniqueRefused
from recruiter.domain.unique import unique as unique_spec
from recruiter.domain.workable import Workable

# What an enqueuer's ``enqueue`` returns, carried by the builder so that ``enqueue()`` is typed:
# a JobHandle for a Recruiter, a coroutine of an AsyncJobHandle for an AsyncRecruiter.
R_co = TypeVar("R_co", covariant=True)


class Enqueuer(Protocol[R_co]):
    """Who writes a built job: a :class:`~recruiter.Recruiter` (returns its handle, which is
    its id) or an :class:`~recruiter.AsyncRecruiter` (returns an awaitable of it)."""

    def enqueue(self, item: JobBuilder[Any], *, session: Any = None) -> R_co: ...


@dataclass(frozen=True)
class JobBuilder(Generic[R_co]):
    """Fluent, immutable description of one job; ``enqueue()`` writes it.

    ``enqueue()`` returns the job's handle (:class:`~recruiter.JobHandle`, which is
    its id) for a sync :class:`~recruiter.Recruiter` and an awaitable of an
    :class:`~recruiter.AsyncJobHandle` for an :class:`~recruiter.AsyncRecruiter`.
    """

    workable: Workable
    recruiter: Enqueuer[R_co] = field(repr=False)
    options: JobOptions = field(default_factory=JobOptions)

    def _with(self, options: JobOptions) -> JobBuilder[R_co]:
        return dataclasses.replace(self, options=options)

    def in_group(self, group: str) -> JobBuilder[R_co]:
        return self._with(replace(self.options, group=checked_name("group", group)))

    def tagged(self, *tags: str) -> JobBuilder[R_co]:
        return self._with(replace(self.options, tags=self.options.tags + tuple(checked_tag(t) for t in tags)))

    def schedule_at(self, when: datetime) -> JobBuilder[R_co]:
        if not isinstance(when, datetime):
            raise JobRefused(f"schedule_at needs a datetime, got {when!r}")
        return self._with(replace(self.options, scheduled_at=when, schedule_in=None))

    def schedule_in(self, delta: timedelta | None = None, **units: float) -> JobBuilder[R_co]:
        """Delay the job by ``delta`` or by ``timedelta(**units)``, e.g. ``schedule_in(minutes=5)``."""
        try:
            delay = (delta or timedelta()) + timedelta(**units)
        except (TypeError, OverflowError, ValueError) as exc:
            raise JobRefused(f"schedule_in needs a timedelta or units like minutes=5: {exc}") from None
        if delay < timedelta():
            raise JobRefused(f"schedule_in needs a non-negative delay, got {delay}")
        return self._with(replace(self.options, schedule_in=delay, scheduled_at=None))

    def retry_with(self, policy: RetryPolicy) -> JobBuilder[R_co]:
        return self._with(replace(self.options, retry_policy=check_policy(policy)))

    def for_tenant(self, tenant: str) -> JobBuilder[R_co]:
        return self._with(replace(self.options, tenant=checked_name("tenant", tenant)))

    def with_priority(self, priority: str) -> JobBuilder[R_co]:
        return self._with(replace(self.options, priority=Priority(checked_priority(priority))))

    def with_timeout(self, seconds: float | timedelta) -> JobBuilder[R_co]:
        return self._with(replace(self.options, timeout_s=check_timeout(seconds)))

    def at_most_once(self) -> JobBuilder[R_co]:
        """Never run this job a second time after its worker died during an attempt: a crash
        archives it (``why: "crashed"``) instead of running it again."""
        return self._with(replace(self.options, at_most_once=True))

    def max_snoozes(self, times: int) -> JobBuilder[R_co]:
        """Let this job snooze (return ``Snooze(...)``) at most ``times`` times; the snooze past
        that archives it ``snoozed-too-often``. Default: the class's ``max_snoozes``, else
        ``DEFAULT_MAX_SNOOZES`` (see :mod:`recruiter.domain.snooze`)."""
        return self._with(replace(self.options, max_snoozes=checked_max_snoozes(times)))

    def on_worker(self, worker_id: str, deadline: datetime | timedelta | None = None) -> JobBuilder[R_co]:
        """Only the worker started with ``--id worker_id`` may run this job (any of its slots).

        The job waits while that worker is absent; it is archived (``why: "worker-gone"``)
        if the cleaner removes that worker as dead, and (``why: "worker-deadline"``) if it
        has not started by ``deadline`` (a time, or a delay from the enqueue)."""
        problem = worker_id_problem(worker_id)
        if problem:
            raise JobRefused(problem)
        try:
            deadline_at(deadline, datetime.now(UTC))  # checked now; computed at build
        except ValueError as exc:
            raise JobRefused(str(exc)) from None
        return self._with(replace(self.options, on_worker=worker_id, worker_deadline=deadline))

    def unique(self, key: str, *, scope: str | timedelta = "unfinished",
               on_conflict: str = "existing") -> JobBuilder[R_co]:
        """At most one job with ``key`` (a string) while ``scope`` lasts: ``"unfinished"`` (while
        it waits or runs), a ``timedelta`` (also that long after it was enqueued, finished or
        not) or ``"forever"``. Enqueueing a second one returns the existing job's handle
        (``handle.existed``); ``on_conflict="resubmit"`` reschedules it instead (a running
        one runs once more, a finished one is enqueued again). See :mod:`recruiter.domain.unique`."""
        try:
            spec = unique_spec(key, scope, on_conflict)
        except UniqueRefused as exc:
            raise JobRefused(str(exc)) from None
        return self._with(replace(self.options, unique=spec))

    def after(self, *jobs: object, if_failed: str = "cancel",
              on: Mapping[str, str] | None = None) -> JobBuilder[R_co]:
        """Run this job only once every one of ``jobs`` (handles or ids) has ended; until then no
        worker is handed it. What one of them ending other than done means: ``if_failed``,
        ``"cancel"`` (archive this job, ``why: "upstream-failed"``, naming it) or ``"run"``
        (run it anyway), and ``on``, per outcome (``failed``, ``cancelled``, ``unrunnable``,
        ``quarantined``, ``gone``, ``skipped``), ``"cancel"``, ``"skip"`` or ``"run"``, e.g.
        ``on={"cancelled": "run", "failed": "skip"}``. Each call adds its jobs with its policy
        (a job given again takes the later one). See :mod:`recruiter.domain.dependency_policy`."""
        try:
            ids, policy = checked_ids(jobs), checked_policy(checked_if_failed(if_failed), on)
            if len(set(ids) | set(self.options.after)) > MAX_DEPENDENCIES:
                raise DependencyRefused(f"a job may wait for at most {MAX_DEPENDENCIES} jobs")
        except (DependencyRefused, PolicyRefused) as exc:
            raise JobRefused(str(exc)) from None
        old = self.options.policies or (checked_policy(self.options.if_failed, None),) * len(self.options.after)
        mine = dict(zip(self.options.after, old, strict=True)) | dict.fromkeys(ids, policy)
        return self._with(replace(self.options, after=tuple(mine), policies=tuple(mine.values()),
                                  if_failed=if_failed))

    def unique_spec(self) -> Unique | None:
        """The job's unique key and scope (see :meth:`unique`), or None."""
        return unique_of(self.workable, self.options)

    def build(self, now: datetime, max_document_bytes: int | None = None) -> dict[str, object]:
        """The job's document, as the driver takes it (a plain dict; :func:`build_job_document` types it)."""
        return dict(build_job_document(self.workable, self.options, now, max_document_bytes=max_document_bytes))

    def enqueue(self, *, session: Any = None) -> R_co:
        """Write the job; with ``session`` (a client session of the recruiter's own client),
        inside that session's transaction: see :meth:`recruiter.Recruiter.enqueue`."""
        if session is None:
            return self.recruiter.enqueue(self)
        return self.recruiter.enqueue(self, session=session)


def as_builder(item: JobBuilder[Any] | Workable, recruiter: Enqueuer[Any]) -> JobBuilder[R_co]:
    if isinstance(item, JobBuilder):
        return item
    if isinstance(item, Workable):
        return JobBuilder(item, recruiter)
    if getattr(item, "workable_class", None) is not None:  # a function made a job by @job (domain.functions)
        name = getattr(item, "__name__", "f")
        raise JobRefused(f"{name} is a function job: enqueue a call of it, {name}.enqueue(rec, ...) "
                         f"or {name}.workable(...)")
    raise JobRefused(f"expected a Workable or a job builder, got {type(item).__name__}")
