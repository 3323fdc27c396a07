"""Outcomes as values, and the pure document changes they cause.

A worker turns an attempt into an :class:`Outcome` and writes it once, into its
own roster document. The recruiter applies it: :func:`archived_document` for
jobs that are finished, :func:`reschedule_update` for jobs that go back to the
queue. The cleaner uses :func:`crash_update` for jobs of dead workers. Nothing
here does I/O, so each transition is unit-tested on plain dictionaries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal, cast

from bson import ObjectId

from recruiter.domain.handback import Dropped, storable_text
from recruiter.domain.job import MAX_EXECUTIONS_KEPT, Status
from recruiter.domain.lanes import slot_of
from recruiter.domain.naming import qualified_name
from recruiter.domain.records import DecisionDoc, Query, Raw
from recruiter.domain.refusals import MAX_CLASS_CHARS, MAX_FIX_CHARS, MAX_REASON_CHARS
from recruiter.domain.refusals import MAX_KEPT as MAX_REFUSALS_KEPT
from recruiter.domain.resubmit import due_at, late_flag_filter
from recruiter.domain.retry import Archive, Decision, MoveToGroup, RetryAt, WorkerCrashed

Kind = Literal["done", "failed", "crashed", "judged", "timed-out", "interrupted", "cancelled", "refused", "snoozed"]

DONE = "done"
# A job the worker would not run as stored (e.g. its class is outside the allowed modules).
MALFORMED = "malformed"
CRASHED_TOO_MANY_TIMES = "crashed-too-many-times"
CRASHED = "crashed"  # an at_most_once job whose worker died during its attempt
INTERRUPTED = "interrupted"  # an at_most_once job whose attempt a forced stop cut short

# Fields that describe a lock; never copied to archived and removed on unlock. A resubmit
# (recruiter.domain.resubmit) is asked of one lock: the next run after it is the one asked for.
LOCK_FIELDS = ("locked_by", "locked_at", "lock_token", "lock_epoch", "resubmit")
# The texts of a refusal and their bounds, as a job's refusals keep them (recruiter.domain.refusals).
REFUSAL_CUTS = (("reason", MAX_REASON_CHARS), ("class", MAX_CLASS_CHARS), ("fix", MAX_FIX_CHARS))


# ``Execution.of``'s default attempt: the job's ``attempts``. The cleaner passes what a
# job it rescues holds, as it is, since such a job may be malformed.
_ATTEMPTS: object = object()


@dataclass(frozen=True)
class Execution:
    """The record of one attempt, as kept in ``executions`` and ``last_execution``."""

    attempt: int
    kind: Kind
    worker: str
    pid: int | None
    hostname: str | None
    scheduled_at: datetime | None
    started_at: datetime | None
    ended_at: datetime
    error_class: str | None = None
    message: str | None = None
    trace: str | None = None
    assigned_at: datetime | None = None  # when the recruiter handed the job to its worker
    logs: str = ""  # what the attempt logged, its newest MAX_LOG_BYTES (processes.worker.capture)
    logs_cut: int = 0  # bytes dropped before ``logs``
    snooze: int | None = None  # a snoozed attempt: which snooze of the job (recruiter.domain.snooze)
    snoozed_until: datetime | None = None

    @classmethod
    def of(cls, job: Mapping[str, object], kind: Kind, *, pid: int | None, hostname: str | None,
           started_at: datetime | None, ended_at: datetime, error_class: str | None = None,
           message: str | None = None, trace: str | None = None, attempt: object = _ATTEMPTS,
           logs: str = "", logs_cut: int = 0) -> Execution:
        """The execution of ``job``'s current attempt (``attempts``, unless ``attempt`` says
        otherwise), by the worker holding its lock: when it was scheduled and assigned
        comes from the job, the rest from the caller."""
        return cls(
            attempt=int(cast("int", job.get("attempts", 1))) if attempt is _ATTEMPTS else cast("int", attempt),
            kind=kind, worker=slot_of(str(job.get("locked_by"))), pid=pid, hostname=hostname,
            scheduled_at=cast("datetime | None", job.get("scheduled_at")), started_at=started_at,
            ended_at=ended_at, error_class=error_class, message=message, trace=trace,
            assigned_at=cast("datetime | None", job.get("locked_at")), logs=logs, logs_cut=logs_cut,
        )

    def to_document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "attempt": self.attempt,
            "outcome": self.kind,
            "scheduled_at": self.scheduled_at,
            "assigned_at": self.assigned_at,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "worker": self.worker,
            "pid": self.pid,
            "hostname": self.hostname,
            "crashed": self.kind == "crashed",
        }
        # What the job said (its error, its logs) may hold lone surrogates: written as escapes.
        if self.error_class is not None:
            doc.update({"class": storable_text(self.error_class), "message": _text_or_none(self.message),
                        "trace": _text_or_none(self.trace)})
        elif self.message is not None:  # e.g. why an attempt was interrupted
            doc["message"] = storable_text(self.message)
        if self.logs or self.logs_cut:
            doc.update(logs=storable_text(self.logs), logs_cut=self.logs_cut)
        if self.snooze is not None:
            doc.update(snooze=self.snooze, snoozed_until=self.snoozed_until)
        return doc


def _text_or_none(text: str | None) -> str | None:
    return None if text is None else storable_text(text)


@dataclass(frozen=True)
class Outcome:
    """What happened to one assignment, written by the worker that held it.

    ``executed`` is false when the worker judged a crashed job by its policy and
    did not run it; the attempt the recruiter counted when it locked the job is
    then given back.
    """

    job_id: ObjectId
    token: ObjectId
    attempt: int
    executed: bool
    decision: Decision
    execution: Execution | None = None
    result: object = None
    # The worker could not run the job: given back for another (recruiter.domain.refusals).
    refusal: dict[str, object] | None = None
    # A done job whose value was not stored, and why (recruiter.domain.handback).
    result_dropped: Dropped | None = None
    # The workflow steps a done attempt added (its decision: recruiter.domain.added.STEPS_NOT_ADDED).
    steps: list[dict[str, object]] | None = None

    def stripped(self, why: str) -> Outcome:
        """This outcome with nothing the job handed back but its decision: for one the store could
        not write as it was (``why``). A result is dropped saying so; the execution keeps its
        class and times, and says why it lost its message, trace and logs."""
        why = storable_text(why)[:500]
        dropped = self.result_dropped
        if dropped is None and self.result is not None:
            dropped = Dropped(f"the outcome could not be written with it: {why}")
        execution = None if self.execution is None else replace(
            self.execution, message=f"the outcome could not be written with this attempt's details: {why}",
            trace=None, logs="", logs_cut=0)
        decision = self.decision
        if self.steps and isinstance(decision, Archive):  # its steps are not added: the job says why
            decision = Archive(decision.why, f"the outcome could not be written with the steps it added: {why}")
        return replace(self, result=None, result_dropped=dropped, execution=execution, steps=None, decision=decision)

    def to_document(self) -> dict[str, object]:
        """An :class:`~recruiter.domain.records.OutcomeDoc`."""
        doc = {
            "job": self.job_id,
            "token": self.token,
            "attempt": self.attempt,
            "executed": self.executed,
            "decision": decision_to_document(self.decision),
            "execution": self.execution.to_document() if self.execution else None,
            "result": self.result,
        }
        if self.refusal is not None:
            doc["refusal"] = self.refusal
        if self.result_dropped is not None:
            doc["result_dropped"] = self.result_dropped.document()
        if self.steps:
            doc["steps"] = self.steps
        return doc


def decision_to_document(decision: Decision) -> DecisionDoc:
    if isinstance(decision, Archive):
        return {"archive": decision.why} if decision.reason is None else {"archive": decision.why,
                                                                           "reason": decision.reason}
    if isinstance(decision, MoveToGroup):
        return {"retry_at": decision.at, "group": decision.group}
    if isinstance(decision, RetryAt):
        return {"retry_at": decision.at}
    raise TypeError(f"not a retry decision: {decision!r}")


def describe_decision(decision: Decision) -> str:
    """A decision in a few words, for logs: ``archive: done``, ``retry at 2026-…Z``."""
    if isinstance(decision, Archive):
        return f"archive: {decision.why}"
    when = decision.at.isoformat().replace("+00:00", "Z")
    if isinstance(decision, MoveToGroup):
        return f"move to group {decision.group} at {when}"
    return f"retry at {when}"


def _decision(outcome_doc: Raw) -> DecisionDoc:
    # The outcome passed documents.outcome_problem, which checked its decision.
    return cast(DecisionDoc, outcome_doc["decision"])


def is_archive(outcome_doc: Raw) -> bool:
    return "archive" in _decision(outcome_doc)


def held_by(job: Raw | None, outcome_doc: Raw) -> bool:
    """Whether ``job`` is still under the lock the outcome was produced for (fencing)."""
    return job is not None and job.get("locked") is True and job.get("lock_token") == outcome_doc["token"]


# The newest this many entries of ``executions`` keep their ``trace`` and ``logs``; older ones
# lose them (and say so with ``details_dropped``), so a job that failed many times stays
# well under the document size limit (HISTORY_ALLOWANCE_BYTES).
DETAILED_EXECUTIONS_KEPT = 5
DETAIL_FIELDS = ("trace", "logs", "logs_cut")


def history_entry(execution: Raw) -> dict[str, object]:
    """An execution without its details (``trace``, ``logs``): as the cleaner pushes a crash,
    and as ``executions`` keeps all but its newest ``DETAILED_EXECUTIONS_KEPT`` entries."""
    return {k: v for k, v in execution.items() if k not in DETAIL_FIELDS}


def without_details(entry: object) -> object:
    """A history entry past the newest ``DETAILED_EXECUTIONS_KEPT``: its details dropped, flagged
    ``details_dropped`` if it had any. Anything else a history holds is kept as it is."""
    if not isinstance(entry, Mapping) or not any(entry.get(k) for k in DETAIL_FIELDS):
        return entry
    return {**history_entry(entry), "details_dropped": True}


def jobs_referenced_by(entry: Raw) -> set[object]:
    """The jobs a roster entry knows it holds: its assignment, running job or pending outcome.

    Needs the entry's ``assigned_to``, ``working_on`` and ``outcome.job`` fields.
    """
    assigned, outcome = entry.get("assigned_to"), entry.get("outcome")
    own = entry.get("_id")
    refs = [assigned.get(own) if isinstance(assigned, dict) and isinstance(own, str) else None,
            entry.get("working_on"),
            outcome.get("job") if isinstance(outcome, dict) else None]
    # Any value may be read from a malformed entry: keep the ones that can name a job.
    return {r for r in refs if r is not None and not isinstance(r, dict | list)}


REFERENCE_FIELDS = {"assigned_to": 1, "working_on": 1, "outcome.job": 1}


def history(job: Raw, execution: Raw | None) -> list[object]:
    """``job``'s ``executions`` once ``execution`` is added: the newest ``MAX_EXECUTIONS_KEPT``,
    of which the newest ``DETAILED_EXECUTIONS_KEPT`` keep their trace and logs (pure)."""
    executions = list(cast("list[object]", job.get("executions") or []))
    if execution is not None:
        executions.append(dict(execution))
    executions = executions[-MAX_EXECUTIONS_KEPT:]
    cut = max(0, len(executions) - DETAILED_EXECUTIONS_KEPT)
    return [without_details(e) for e in executions[:cut]] + executions[cut:]


def _execution(outcome_doc: Raw) -> Raw | None:
    # Checked as an embedded document (documents.OUTCOME), or null.
    return cast(Raw | None, outcome_doc.get("execution"))


def archived_document(job: Raw, outcome_doc: Raw, now: datetime) -> dict[str, object]:
    """The ``archived`` copy of ``job`` finished by ``outcome_doc``."""
    decision = _decision(outcome_doc)
    why = decision["archive"]
    execution = _execution(outcome_doc)
    doc = {k: v for k, v in job.items() if k not in LOCK_FIELDS and k not in ("status", "crash_pending")}
    doc.update(
        done=why == DONE,
        locked=False,
        why=why,
        archived_at=now,
        executions=history(job, execution),
    )
    reason = decision.get("reason")
    if isinstance(reason, str):  # e.g. why a job was refused as malformed
        doc["reason"] = reason
    if not outcome_doc["executed"]:
        doc["attempts"] = max(0, cast(int, job.get("attempts", 1)) - 1)  # a count: documents.JOB
    if execution is not None:
        doc["last_execution"] = execution
    if outcome_doc.get("result") is not None:
        doc["result"] = outcome_doc["result"]
    if isinstance(outcome_doc.get("result_dropped"), dict):  # checked by documents.OUTCOME
        doc["result_dropped"] = outcome_doc["result_dropped"]
    return doc


def reschedule_update(job: Raw, outcome_doc: Raw) -> tuple[Query, Query]:
    """Filter and update that put ``job`` back in the queue as ``outcome_doc`` decided."""
    decision = _decision(outcome_doc)
    execution = _execution(outcome_doc)
    set_: Query = {
        "locked": False,
        "status": Status.RETRYING.value,
        "scheduled_at": decision["retry_at"],
    }
    if decision.get("group"):
        set_["group"] = decision["group"]
    if execution is not None:
        # The whole history, as archiving writes it: the job read is the one under this lock
        # (the filter's token), and no writer changes its history while it is locked.
        set_.update(last_execution=execution, executions=history(job, execution))
    update: Query = {
        "$set": set_,
        "$unset": {f: "" for f in (*LOCK_FIELDS, "crash_pending")},
    }
    if not outcome_doc["executed"]:
        update["$inc"] = {"attempts": -1}
    refusal = outcome_doc.get("refusal")
    if isinstance(refusal, dict):  # checked by documents.OUTCOME
        # Cut again here: the outcome is the worker's word, the job's refusals every view's.
        entry = {k: refusal[k] for k in ("process", "worker", "reason", "at", "kind", "class", "fix") if k in refusal}
        entry.update({k: str(entry[k])[:n] for k, n in REFUSAL_CUTS if k in entry})
        update["$push"] = {"refusals": {"$each": [entry], "$slice": -MAX_REFUSALS_KEPT}}
        update["$min"] = {"first_refused_at": refusal["at"]}
        set_["refusals_until"] = refusal["until"]
    # A job resubmitted meanwhile is not matched: the round reads it again (resubmit_update).
    return {"_id": job["_id"], "lock_token": outcome_doc["token"], **late_flag_filter()}, update


def resubmit_update(job: Raw, outcome_doc: Raw, now: datetime) -> tuple[Query, Query]:
    """Filter and update that put a resubmitted ``job`` back in the queue when its attempt ends,
    whatever ``outcome_doc`` decided (see :mod:`recruiter.domain.resubmit`): due at the
    resubmit's ``at`` (else ``now``), the attempt kept in its history, ``resubmits`` counted.
    A decision to move it to another group is kept."""
    decision = _decision(outcome_doc)
    execution = _execution(outcome_doc)
    set_: Query = {"locked": False, "status": Status.QUEUED.value, "scheduled_at": due_at(job, now)}
    if decision.get("group"):
        set_["group"] = decision["group"]
    if execution is not None:
        set_.update(last_execution=execution, executions=history(job, execution))
    inc: Query = {"resubmits": 1}
    if not outcome_doc["executed"]:
        inc["attempts"] = -1
    update: Query = {"$set": set_, "$unset": {f: "" for f in (*LOCK_FIELDS, "crash_pending")}, "$inc": inc}
    return {"_id": job["_id"], "lock_token": outcome_doc["token"]}, update


def crash_update(job: dict[str, Any], worker: dict[str, Any] | None, now: datetime,
                 reason: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Filter and update that unlock a job whose worker died, recording a crashed attempt.

    The job becomes due at once with ``crash_pending`` set: the next worker
    judges the crash (:func:`recruiter.domain.attempt.judge_crash`: the poison limit,
    or ``at_most_once``) before running it again.
    """
    worker = worker or {}
    execution = Execution.of(
        job, "crashed", attempt=job.get("attempts", 0), pid=worker.get("pid"),
        hostname=worker.get("hostname"), started_at=worker.get("working_since") or job.get("locked_at"),
        ended_at=now, error_class=qualified_name(WorkerCrashed), message=reason,
    ).to_document()
    update = {
        "$set": {
            "locked": False,
            "status": Status.RETRYING.value,
            "scheduled_at": now,
            "crash_pending": True,
            "last_execution": execution,
        },
        "$unset": {f: "" for f in LOCK_FIELDS},
        "$inc": {"crashes": 1},
        "$push": {"executions": {"$each": [history_entry(execution)], "$slice": -MAX_EXECUTIONS_KEPT}},
    }
    return {"_id": job["_id"], "lock_token": job.get("lock_token"), "locked": True}, update


# Undo a lock the recruiter took but never handed to a worker: not an attempt.
ROLLBACK_PIPELINE: list[Query] = [
    {"$set": {
        "locked": False,
        "attempts": {"$max": [0, {"$subtract": ["$attempts", 1]}]},
        "status": {"$cond": [{"$gt": ["$attempts", 1]}, Status.RETRYING.value, Status.QUEUED.value]},
    }},
    {"$unset": list(LOCK_FIELDS)},
]
