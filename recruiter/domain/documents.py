"""Reading documents from the database as untrusted input: pure checks, no I/O.

Every document the processes read may come from an older version, another
language, a hand edit in ``mongosh`` or a bug. This module is the one place
that says what a well-formed document is. Its readers never raise on data:
they return ``None`` for a document that is fine and, for one that is not, a
one-line reason naming the field (``tenant: expected a non-empty string or
null, got int``).

- :func:`job_problem` checks a ``scheduled`` document: every field the
  recruiter, the workers and the cleaner use, nested ones included
  (``workable.class``, ``last_execution.attempt``, ``executions.3``), and
  that a copy of it can be written by an update (:func:`copy_problem`: no
  ``$``-prefixed or dotted field name at any depth, at most
  :data:`MAX_JOB_LEVELS` levels), since the round copies it into the roster.
  A job with a problem is quarantined (:mod:`recruiter.domain.quarantine`).
- :func:`entry_problem` checks a ``roster`` entry, and :func:`outcome_problem`
  the outcome a worker recorded in it. A malformed entry is skipped (one
  warning per entry, :class:`WarnOnce`) and removed by the cleaner once it
  stops heartbeating.
- :func:`names_problem` and :func:`cursor_problem` check the ``metadata``
  documents (pause switches, fairness cursor); a malformed one is read as
  empty, with a warning.

Invariants:

- A checker returns ``None`` or a ``str``; no input value makes it raise
  (property-tested with random corruptions in ``tests/unit/test_documents.py``).
- A document with no problem can be used with ``doc["field"]`` for the
  required fields and with comparisons between its names (groups and tenants
  are strings), so the selection and the fairness cursor cannot meet a value
  of another type.
- Checking is CPU only: no extra read.
- The field checks it is built from are :mod:`recruiter.domain.checks`.
- :func:`checked_job`, :func:`checked_entry` and :func:`checked_outcome` are
  the boundary into the typed domain: ``Raw`` in, the same document typed as
  its :mod:`recruiter.domain.records` TypedDict out (or why not). They are the
  only casts to those types; each TypedDict promises no more than its checker
  checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

from recruiter.domain.checks import (
    Check,
    Problem,
    boolean,
    count,
    date,
    document,
    epoch,
    expected,
    fields,
    fields_problem,
    group_name,
    job_id,
    list_of,
    name,
    object_id,
    one_of,
    optional,
    positive_seconds,
    queue_name,
    text,
)
from recruiter.domain.field_names import MAX_DEPTH, deepest, odd_name_problem
from recruiter.domain.records import JobDoc, OutcomeDoc, Raw, RosterEntryDoc

# Levels a copy of a job is stored below its own: the roster's ``job`` field, and one more for the
# round's ``$literal`` list of picks that carries it there (recruiter.store.roster.assign).
COPY_LEVELS = 2
MAX_JOB_LEVELS = MAX_DEPTH - COPY_LEVELS

JOB_STATUSES = ("queued", "retrying", "assigned")
UNLOCKED_STATUSES = ("queued", "retrying")
PRIORITIES = ("high", "low")


# -- jobs ----------------------------------------------------------------------------------------

WORKABLE: dict[str, tuple[bool, Check]] = {
    "class": (True, name),
    "parameters": (False, optional(document)),
    "method": (False, optional(name)),
}
RETRY_POLICY: dict[str, tuple[bool, Check]] = {
    "class": (True, name),
    "parameters": (False, optional(document)),
}
LAST_EXECUTION: dict[str, tuple[bool, Check]] = {
    "attempt": (False, optional(count)),
    "scheduled_at": (False, optional(date)),
    "started_at": (False, optional(date)),
    "ended_at": (False, optional(date)),
    "message": (False, optional(text)),
}
# Every field of a ``scheduled`` document that some process reads, in the order checked.
JOB: dict[str, tuple[bool, Check]] = {
    "_id": (True, job_id),
    "group": (True, group_name),
    "tenant": (False, optional(queue_name)),
    "status": (True, one_of(*JOB_STATUSES)),
    "locked": (True, boolean),
    "priority": (True, one_of(*PRIORITIES)),
    "scheduled_at": (True, date),
    "created_at": (True, date),
    "attempts": (True, count),
    "crashes": (False, count),
    "crash_pending": (False, boolean),
    "done": (False, boolean),
    "workable": (True, fields(WORKABLE)),
    "retry_policy": (True, fields(RETRY_POLICY)),
    "timeout_s": (False, optional(positive_seconds)),
    "tags": (False, list_of(name)),
    "executions": (False, list_of(document)),
    "last_execution": (False, optional(fields(LAST_EXECUTION))),
    # Workers that could not run it (recruiter.domain.refusals): the round $pushes to this list.
    "refusals": (False, list_of(document)),
    "first_refused_at": (False, date),
    "refusals_until": (False, date),
}
# The lock of a locked job, as the recruiter wrote it.
LOCK: dict[str, tuple[bool, Check]] = {
    "locked_by": (True, name),
    "lock_token": (True, object_id),
    "locked_at": (True, date),
    "lock_epoch": (False, epoch),
}


def job_problem(doc: object) -> Problem:
    """What is wrong with a ``scheduled`` document, naming the field; None if nothing."""
    if not isinstance(doc, Mapping):
        return f"document: {expected('an embedded document', doc)}"
    problem = fields_problem(doc, JOB)
    if problem:
        return problem
    if doc["locked"]:
        if doc["status"] != "assigned":
            return f"status: expected 'assigned' for a locked job, got {doc['status']!r}"
        problem = fields_problem(doc, LOCK)
    elif doc["status"] not in UNLOCKED_STATUSES:
        return f"status: expected queued or retrying for an unlocked job, got {doc['status']!r}"
    return problem or copy_problem(doc)


def copy_problem(doc: Mapping[str, object]) -> Problem:
    """Why a copy of ``doc`` cannot be written by an update, as the round writes a job into the
    roster: a ``$``-prefixed or dotted field name, or more levels than a copy can take
    (:data:`recruiter.domain.job.MAX_JOB_LEVELS`); None if it can."""
    problem = odd_name_problem({k: v for k, v in doc.items() if k != "_id"}, "")
    if problem:
        return problem
    levels = max((deepest(v, 1) for v in doc.values()), default=0)
    if levels > MAX_JOB_LEVELS:
        return f"document: nested {levels} levels deep; a job copied into the roster may nest {MAX_JOB_LEVELS}"
    return None


@dataclass(frozen=True)
class Malformed:
    """A document that failed its check: its ``_id`` (as read, maybe itself bad), why, and the document."""

    id: object
    reason: str
    document: Raw


def check_job(doc: object) -> Malformed | None:
    """None for a well-formed job, else what quarantining it needs."""
    problem = job_problem(doc)
    if problem is None:
        return None
    raw: Raw = doc if isinstance(doc, Mapping) else {"_id": None, "document": doc}
    return Malformed(raw.get("_id"), problem, raw)


def checked_job(doc: object) -> JobDoc | Malformed:
    """The job, typed, if it is well-formed; else what quarantining it needs."""
    found = check_job(doc)
    # The one place a raw document becomes a JobDoc: job_problem checked every field JobDoc promises.
    return cast(JobDoc, doc) if found is None else found


# -- roster entries and outcomes ----------------------------------------------------------------

def _decision(value: object) -> Problem:
    if not isinstance(value, Mapping):
        return expected("an embedded document", value)
    if "archive" in value:
        problem = fields_problem(value, {"archive": (True, name), "reason": (False, optional(text))})
    else:
        problem = fields_problem(value, {"retry_at": (True, date), "group": (False, optional(group_name))})
    return f".{problem}" if problem else None


def _execution(value: object) -> Problem:
    """The attempt an outcome reports, which the round ``$set``s into its job's history: a document
    whose names such an update can store (an insert stores more: an entry written whole may hold
    one that the round's write would then fail with, at every round)."""
    problem = document(value)
    found = None if problem else odd_name_problem(value, "")
    return problem or (f".{found}" if found else None)


OUTCOME: dict[str, tuple[bool, Check]] = {
    "job": (True, job_id),
    "token": (True, object_id),
    "executed": (True, boolean),
    "decision": (True, _decision),
    "execution": (False, optional(_execution)),
    # A worker that could not run the job gave it back (recruiter.domain.refusals).
    # Its kind, class and fix (optional: a worker of an older version writes none) are what the views show.
    "refusal": (False, optional(fields({"process": (True, text), "worker": (True, text), "reason": (True, text),
                                        "at": (True, date), "until": (True, date),
                                        "kind": (False, one_of("not-allowed", "cannot-import")),
                                        "class": (False, text), "fix": (False, text)}))),
    # A done job whose value was not stored (recruiter.domain.handback.Dropped).
    "result_dropped": (False, optional(fields({"reason": (True, text), "size_bytes": (False, optional(count))}))),
    # The workflow steps a done attempt added (recruiter.domain.added checks each).
    "steps": (False, optional(list_of(document))),
}

ENTRY: dict[str, tuple[bool, Check]] = {
    "_id": (True, name),
    "work_on": (False, list_of(name)),
    "available": (False, boolean),
    "available_since": (False, optional(date)),
    "last_seen_at": (False, date),  # heartbeats live in `heartbeats` (recruiter.liveness); older entries
    "stopping": (False, boolean),
    "stop_requested": (False, boolean),
    "working": (False, boolean),
    "assigned_to": (False, optional(document)),
    "working_on": (False, optional(job_id)),
}


def outcome_problem(outcome: object, where: str = "") -> Problem:
    """What is wrong with the ``outcome`` a worker recorded; None if nothing.

    ``where`` is the outcome's field in the document that holds it, named in
    front of the reason (``outcome.decision: missing``).
    """
    if not isinstance(outcome, Mapping):
        wrong = expected("an embedded document", outcome)
        return f"{where}: {wrong}" if where else wrong
    problem = fields_problem(outcome, OUTCOME)
    return f"{where}.{problem}" if where and problem else problem


def checked_outcome(outcome: object) -> OutcomeDoc | str:
    """The outcome, typed, if it is well-formed; else what is wrong with it."""
    problem = outcome_problem(outcome)
    return cast(OutcomeDoc, outcome) if problem is None else problem


def entry_problem(entry: object) -> Problem:
    """What is wrong with a ``roster`` entry (as projected by its reader); None if nothing."""
    if not isinstance(entry, Mapping):
        return f"document: {expected('an embedded document', entry)}"
    problem = fields_problem(entry, ENTRY)
    if problem:
        return problem
    if entry.get("available") and "work_on" not in entry:
        return "work_on: missing"
    assigned = entry.get("assigned_to") or {}
    for key, value in cast(Raw, assigned).items():  # a document: ENTRY checked it
        if (p := job_id(value)) and value is not None:
            return f"assigned_to.{key}: {p}"
    if entry.get("outcome") is not None:
        return outcome_problem(entry["outcome"], "outcome")
    return None


def checked_entry(entry: object) -> RosterEntryDoc | str:
    """The roster entry, typed, if it is well-formed; else what is wrong with it."""
    problem = entry_problem(entry)
    return cast(RosterEntryDoc, entry) if problem is None else problem


# -- metadata ------------------------------------------------------------------------------------

def names_problem(value: object) -> Problem:
    """A list of names (pause switches), or missing."""
    return None if value is None else list_of(name)(value)


def cursor_problem(doc: object) -> Problem:
    """What is wrong with the fairness cursor document (see :mod:`recruiter.domain.control`)."""
    if doc is None:
        return None
    if not isinstance(doc, Mapping):
        return f"document: {expected('an embedded document', doc)}"
    return (fields_problem(doc, {"last_group": (False, optional(name))})
            or _last_tenant_problem(doc.get("last_tenant") or {})
            or _counts_problem(doc.get("counts") or {}))


def _last_tenant_problem(last_tenant: object) -> Problem:
    """The cursor's ``last_tenant``: group -> the tenant served last ("" for none yet)."""
    if not isinstance(last_tenant, Mapping):
        return f"last_tenant: {expected('an embedded document', last_tenant)}"
    for group, tenant in last_tenant.items():
        if (p := name(tenant)) and tenant != "":
            return f"last_tenant.{group}: {p}"
    return None


def _counts_problem(counts: object) -> Problem:
    """The cursor's ``counts``: group -> tenant -> jobs served."""
    if not isinstance(counts, Mapping):
        return f"counts: {expected('an embedded document', counts)}"
    for group, tenants in counts.items():
        if not isinstance(tenants, Mapping):
            return f"counts.{group}: {expected('an embedded document', tenants)}"
        for tenant, n in tenants.items():
            if p := count(n):
                return f"counts.{group}.{tenant}: {p}"
    return None


class WarnOnce:
    """Remembers what was warned about, so a malformed document read every round is logged once.

    Bounded: past ``limit`` keys it forgets and may warn again.
    """

    def __init__(self, limit: int = 10_000) -> None:
        self._seen: set[tuple[str, str]] = set()
        self._limit = limit

    def first(self, key: object, reason: str) -> bool:
        """True the first time ``(key, reason)`` is seen."""
        k = (repr(key)[:200], reason)
        if k in self._seen:
            return False
        if len(self._seen) >= self._limit:
            self._seen.clear()
        self._seen.add(k)
        return True
