"""Pure job-document building, shared by the sync and asyncio producers.

``build_job_document`` is the only place a ``scheduled`` document is born. It
validates everything a user can get wrong before anything is written, so a bad
job is refused at enqueue with a clear error instead of failing in a worker.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import cast

import bson
from bson import ObjectId
from bson.errors import InvalidDocument

from recruiter.domain.clock import utc
from recruiter.domain.dependencies import held_fields
from recruiter.domain.dependency_policy import Policy, checked_policy
from recruiter.domain.documents import COPY_LEVELS, MAX_JOB_LEVELS
from recruiter.domain.field_names import MAX_DEPTH, deepest, odd_name_problem
from recruiter.domain.handback import DEFAULT_MAX_RESULT_BYTES
from recruiter.domain.naming import class_names, importable_problem, name_problem, qualified_name
from recruiter.domain.placement import deadline_at, on_worker_document, worker_group, worker_id_problem
from recruiter.domain.records import JobDoc, PolicyDocument, WorkableDocument
from recruiter.domain.records import Priority as PriorityName
from recruiter.domain.retry import DoNotDoItAgain, RetryPolicy, WorkerCrashed, policy_to_document
from recruiter.domain.snooze import max_snoozes_problem
from recruiter.domain.unique import Unique, UniqueRefused
from recruiter.domain.unique import unique as unique_spec
from recruiter.domain.workable import Workable, named_object, rebuild_problem

DEFAULT_GROUP = "generic"
MAX_EXECUTIONS_KEPT = 20


class Status(StrEnum):
    """Where a job in ``scheduled`` is. ``archived`` documents carry ``why`` instead."""

    QUEUED = "queued"  # waiting for its first attempt (maybe not due yet)
    RETRYING = "retrying"  # a previous attempt failed or crashed; waiting for the next
    ASSIGNED = "assigned"  # locked by the recruiter and given to one worker


class Priority(StrEnum):
    HIGH = "high"
    LOW = "low"


class JobRefused(ValueError):
    """The job cannot be enqueued as given; nothing was written.

    The reason is always one line, so it can be logged or shown as it is.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(" ".join(str(reason).split()))


# A worker waits on a job's timeout with poll(2), whose longest wait is 2**31 ms (24.8 days).
MAX_TIMEOUT_S = 24 * 24 * 3600.0
# Room kept below the server's document size limit for what a job gathers over its
# life: up to MAX_EXECUTIONS_KEPT history entries (a 2 000-character message each), the
# newest DETAILED_EXECUTIONS_KEPT (5) of them and ``last_execution`` also with an
# 8 000-character trace and 64 KiB of logs, the lock fields, and a result of the default
# limit (DEFAULT_MAX_RESULT_BYTES, 1 MiB). tests/unit/test_naming.py checks the worst case fits.
GROWTH_WITHOUT_RESULT_BYTES = 960 * 1024  # the worst case is about 760 KiB
HISTORY_ALLOWANCE_BYTES = GROWTH_WITHOUT_RESULT_BYTES + DEFAULT_MAX_RESULT_BYTES

# MongoDB's document size limit (a server may state another in its hello).
SERVER_MAX_DOCUMENT_BYTES = 16 * 1024 * 1024


def result_room_bytes(job: Mapping[str, object], max_document_bytes: int = SERVER_MAX_DOCUMENT_BYTES) -> int:
    """How big a result the archived copy of ``job`` has room for, with its history full."""
    try:
        size = len(bson.encode(job))
    except Exception:  # noqa: BLE001 - a document read from the server encodes; be safe all the same
        return 0
    return max_document_bytes - size - GROWTH_WITHOUT_RESULT_BYTES


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
    at_most_once: bool = False
    max_snoozes: int | None = None  # .max_snoozes(n); else the class's (recruiter.domain.snooze)
    unique: Unique | None = None  # .unique(...); else the class's unique_key() (recruiter.domain.unique)
    # Only the worker started with this ``--id`` runs the job (recruiter.domain.placement).
    on_worker: str | None = None
    worker_deadline: datetime | timedelta | None = None
    # The jobs it waits for, and what a failed one means (recruiter.domain.dependencies).
    after: tuple[ObjectId, ...] = ()
    if_failed: str = "cancel"
    # The policy of each of ``after`` (same order; recruiter.domain.dependency_policy); empty: ``if_failed``'s.
    policies: tuple[Policy, ...] = ()
    job_id: ObjectId | None = None  # set by recruiter.domain.flows, which links jobs before they are written


def checked_max_snoozes(value: object) -> int:
    """A cap on a job's snoozes, checked (:func:`recruiter.domain.snooze.max_snoozes_problem`)."""
    problem = max_snoozes_problem(value)
    if problem:
        raise JobRefused(problem)
    return cast(int, value)


def checked_name(kind: str, value: object) -> str:
    problem = name_problem(kind, value)
    if problem:
        raise JobRefused(problem)
    return str(value)


def checked_tag(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise JobRefused(f"tag must be a non-empty string, got {value!r}")
    if value == "*":
        raise JobRefused("tag '*' is reserved")
    return value


def check_timeout(value: object) -> float:
    """A job timeout in seconds (or a ``timedelta``): finite, above zero and at most ``MAX_TIMEOUT_S``."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise JobRefused(f"timeout must be a positive number of seconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise JobRefused(f"timeout must be a positive number of seconds, and finite, got {value!r}")
    if value > MAX_TIMEOUT_S:
        raise JobRefused(f"timeout must be at most {MAX_TIMEOUT_S:.0f} seconds (24 days), got {value!r}")
    return float(value)


def check_policy(policy: object) -> RetryPolicy:
    if not isinstance(policy, RetryPolicy):
        raise JobRefused(f"retry policy must be a recruiter.retry.RetryPolicy, got {policy!r}")
    return policy


def _policy_document(policy: RetryPolicy) -> PolicyDocument:
    try:
        doc = policy_to_document(policy)
    except (TypeError, ValueError) as exc:
        raise JobRefused(f"cannot store retry policy {type(policy).__qualname__}: {exc}") from None
    for name in class_names(doc):
        problem = importable_problem(name)
        if problem:
            raise JobRefused(f"retry policy: {problem}")
    _check_names(doc.get("parameters"), "retry_policy.parameters", f"retry policy {doc.get('class')}")
    # As the policy wrote it; the worker checks it again (documents.RETRY_POLICY) before use.
    return cast(PolicyDocument, doc)


def _workable_document(workable: object) -> WorkableDocument:
    if not isinstance(workable, Workable):
        raise JobRefused(f"only recruiter.Workable instances can be enqueued, got {type(workable).__name__}")
    cls = type(workable)
    try:
        doc = workable.to_document()
    except TypeError as exc:
        raise JobRefused(str(exc)) from exc
    problem = importable_problem(doc["class"], expected=named_object(cls))
    if problem:
        raise JobRefused(problem)
    # A subclass may override export_parameters or method with anything: checked, not trusted.
    parameters, method = doc.get("parameters"), doc.get("method")
    if not isinstance(parameters, Mapping):
        raise JobRefused(f"parameters of {doc['class']} must be a dict, got {type(parameters).__name__}")
    if not isinstance(method, str) or not callable(getattr(cls, method, None)):
        raise JobRefused(f"{doc['class']} has no method {method!r} to run")
    _check_names(parameters, "parameters", doc["class"])
    problem = rebuild_problem(workable, parameters)
    if problem:
        raise JobRefused(problem)
    return doc


def _check_names(value: object, path: str, owner: str) -> None:
    """Refuse a ``$``-prefixed or dotted field name at any depth: the round copies the job into
    the roster with an update, where MongoDB cannot take such names (recruiter.domain.storage_rules)."""
    problem = odd_name_problem(value, path)
    if problem:
        raise JobRefused(f"cannot enqueue {owner}: {problem}")


def _scheduled_at(options: JobOptions, now: datetime) -> datetime:
    try:
        if options.scheduled_at is not None:
            if not isinstance(options.scheduled_at, datetime):
                raise JobRefused(f"schedule_at needs a datetime, got {options.scheduled_at!r}")
            return utc(options.scheduled_at)
        if options.schedule_in is not None:
            return utc(now + options.schedule_in)
    except (OverflowError, TypeError) as exc:
        raise JobRefused(f"cannot schedule the job: {exc}") from None
    return now


def _timeout(options: JobOptions, workable: Workable) -> float | None:
    timeout_s = options.timeout_s if options.timeout_s is not None else getattr(type(workable), "timeout_s", None)
    return None if timeout_s is None else check_timeout(timeout_s)


def checked_priority(value: object) -> PriorityName:
    try:
        # Not a string: no priority (the same refusal as for an unknown name).
        return "high" if Priority(value if isinstance(value, str) else "") is Priority.HIGH else "low"
    except ValueError:
        raise JobRefused(f"priority must be 'high' or 'low', got {value!r}") from None


def build_job_document(
    workable: Workable,
    options: JobOptions,
    now: datetime,
    job_id: ObjectId | None = None,
    *,
    max_document_bytes: int | None = None,
) -> JobDoc:
    """The ``scheduled`` document for ``workable`` enqueued at ``now``.

    Raises :class:`JobRefused` when the workable, its parameters or the options
    cannot be stored, or when the document would not fit in ``max_document_bytes``
    (the server's ``maxBsonObjectSize``) with room for its history.
    """
    workable_doc = _workable_document(workable)
    # An explicit group is checked as given: in_group("") is an error, not the default.
    group = checked_name("group", options.group if options.group is not None
                        else type(workable).group or DEFAULT_GROUP)
    policy = options.retry_policy if options.retry_policy is not None else type(workable).retry_policy
    now = utc(now)
    timeout_s = _timeout(options, workable)
    doc: JobDoc = {
        "_id": job_id or options.job_id or ObjectId(),
        "done": False,
        "created_at": now,
        "scheduled_at": _scheduled_at(options, now),
        "locked": False,
        "attempts": 0,
        "crashes": 0,
        "status": "queued",  # Status.QUEUED
        "group": group,
        "tags": [checked_tag(tag) for tag in options.tags],
        "tenant": None if options.tenant is None else checked_name("tenant", options.tenant),
        "priority": checked_priority(options.priority),
        "workable": workable_doc,
        "retry_policy": _policy_document(DoNotDoItAgain() if policy is None else check_policy(policy)),
        "executions": [],
    }
    if timeout_s is not None:
        doc["timeout_s"] = timeout_s
    if options.at_most_once or getattr(type(workable), "at_most_once", False) is True:
        _check_at_most_once(doc["retry_policy"])
        doc["at_most_once"] = True
    _cap_snoozes(doc, workable, options)
    if options.on_worker is not None:
        _aim_at_worker(doc, options, now)
    spec = unique_of(workable, options)
    if spec is not None:
        doc["unique"] = spec.field(now)
    if options.after:  # held until they end (recruiter.domain.dependencies)
        _wait_for(doc, options, spec is not None)
    _check_size(doc, max_document_bytes)
    _check_depth(doc)
    return doc


def _cap_snoozes(doc: JobDoc, workable: Workable, options: JobOptions) -> None:
    """The job's cap on snoozes (recruiter.domain.snooze): the builder's, else its class's, if any."""
    cap = options.max_snoozes if options.max_snoozes is not None else getattr(type(workable), "max_snoozes", None)
    if cap is not None:
        doc["max_snoozes"] = checked_max_snoozes(cap)


def _wait_for(doc: JobDoc, options: JobOptions, unique: bool) -> None:
    if unique:
        raise JobRefused("a unique job cannot wait for other jobs (after) yet")
    policies = options.policies or (checked_policy(options.if_failed, None),) * len(options.after)
    held = held_fields(list(zip(options.after, policies, strict=True)), doc["scheduled_at"], doc["_id"])
    doc["scheduled_at"], doc["after"] = held["scheduled_at"], held["after"]


# How a policy document names the crash of a worker (a rule of SelectByException, say).
_WORKER_CRASHED = qualified_name(WorkerCrashed)


def _names(value: object) -> bool:
    if isinstance(value, dict):
        return any(_names(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_names(v) for v in value)
    return value == _WORKER_CRASHED


def _check_at_most_once(policy: PolicyDocument) -> None:
    """A job that must never run twice cannot have a policy that says how to retry a crash."""
    if _names(dict(policy)):
        raise JobRefused(
            f"at_most_once cannot be combined with retry policy {policy['class']}, which retries crashes "
            f"(it names {_WORKER_CRASHED}): an at_most_once job is archived on its first crash"
        )


def _aim_at_worker(doc: JobDoc, options: JobOptions, now: datetime) -> None:
    """Give the job the reserved group of its worker; its own group stays in ``on_worker``."""
    worker_id = options.on_worker
    problem = worker_id_problem(worker_id)
    if problem or worker_id is None:
        raise JobRefused(problem or "on_worker needs a worker id")
    try:
        deadline = deadline_at(options.worker_deadline, now)
    except ValueError as exc:
        raise JobRefused(str(exc)) from None
    doc["on_worker"] = on_worker_document(worker_id, doc["group"], deadline)
    doc["group"] = worker_group(worker_id)


def unique_of(workable: Workable, options: JobOptions) -> Unique | None:
    """The job's unique key: the builder's ``.unique(...)``, else its class's ``unique_key()``
    with the class's ``unique_scope`` and ``unique_on_conflict``; None for no key."""
    if options.unique is not None:
        return options.unique
    try:
        key = workable.unique_key()
        cls = type(workable)
        return None if key is None else unique_spec(key, cls.unique_scope, cls.unique_on_conflict)
    except UniqueRefused as exc:
        raise JobRefused(f"{type(workable).__qualname__}.unique_key(): {exc}") from None


def _check_size(doc: JobDoc, max_document_bytes: int | None) -> None:
    try:
        size = len(bson.encode(doc))
    except (InvalidDocument, TypeError, OverflowError, ValueError) as exc:
        raise JobRefused(
            f"cannot store the parameters of {doc['workable']['class']} in MongoDB: {exc}"
        ) from None
    if max_document_bytes is not None and size > max_document_bytes - HISTORY_ALLOWANCE_BYTES:
        raise JobRefused(
            f"the job document of {doc['workable']['class']} is {size} bytes; the server keeps documents "
            f"of at most {max_document_bytes} bytes and a job needs {HISTORY_ALLOWANCE_BYTES} of them for its history"
        )


def _check_depth(doc: JobDoc) -> None:
    """Refuse a job nested deeper than a copy of it can be stored: MongoDB keeps at most
    ``MAX_DEPTH`` (100) levels, and the round copies the job ``COPY_LEVELS`` deeper."""
    levels = max((deepest(v, 1) for v in doc.values()), default=0)
    if levels > MAX_JOB_LEVELS:
        raise JobRefused(
            f"the job document of {doc['workable']['class']} nests {levels} levels deep; MongoDB keeps at most "
            f"{MAX_DEPTH} and the round copies a job {COPY_LEVELS} levels deeper, so a job may nest {MAX_JOB_LEVELS}"
        )
