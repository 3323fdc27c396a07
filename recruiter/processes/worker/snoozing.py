"""The worker's side of a snooze: an attempt that returned ``Snooze(...)`` turned into its outcome.

The executor asks :func:`snooze_of` of every attempt that ran (:func:`snooze_outcome` of one that
ended without an error). When the
value asks for a snooze (:mod:`recruiter.domain.snooze`), the answer is the outcome to record: the
attempt given back (``executed`` false, so the leader does not count it), an execution of kind
``snoozed`` numbered and dated, and a decision the retry policy had no part in: due at the end of
the snooze, or archived ``snoozed-too-often`` past the job's cap. A snooze that cannot be honoured
comes back as the :class:`~recruiter.domain.snooze.SnoozeRefused` the attempt then failed with.

Invariant: it writes nothing and never raises on what the job returned; the outcome is written
once, fenced like any other, by the slot's roster entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from structlog.typing import FilteringBoundLogger

from recruiter.domain.events import JobFinished
from recruiter.domain.outcome import Execution, Kind, Outcome, describe_decision
from recruiter.domain.snooze import SNOOZED, SnoozeRefused, asked_of, decide_snooze, is_snooze
from recruiter.processes.worker.state import Running
from recruiter.store.layout import Document

if TYPE_CHECKING:
    from recruiter.processes.worker.executor import Ran

# Executor._execution: the record of this attempt, of the kind given.
ExecutionOf = Callable[..., Execution]


def snooze_of(job: Document, ran: Ran, running: Running, bound: FilteringBoundLogger,
              execution_of: ExecutionOf) -> tuple[Ran, Outcome | None]:
    """``(ran, outcome)``: the outcome of an attempt that asked for a snooze; else None, and ``ran``
    as it was, or, for a snooze that cannot be honoured, as the failure it then is."""
    if ran.error is not None:
        return ran, None
    snoozed = snooze_outcome(job, ran.value, ran.started_at, ran.ended_at, running, bound, execution_of)
    if isinstance(snoozed, SnoozeRefused):
        return replace(ran, value=None, error=snoozed, kind="failed"), None
    return ran, snoozed


def snooze_outcome(job: Document, value: object, started_at: datetime, ended_at: datetime, running: Running,
                   bound: FilteringBoundLogger, execution_of: ExecutionOf) -> Outcome | SnoozeRefused | None:
    """The outcome of an attempt whose value asks for a snooze; the refusal the attempt fails with
    when the snooze cannot be honoured; None when the value is no snooze."""
    if not is_snooze(value):
        return None
    asked = asked_of(value)
    snoozed = decide_snooze(job, asked, ended_at) if not isinstance(asked, str) else asked
    if isinstance(snoozed, str):
        bound.warning("job.snooze_refused", reason=snoozed, detail="the attempt fails with SnoozeRefused")
        return SnoozeRefused(snoozed)
    kind: Kind = "snoozed"
    execution = replace(execution_of(job, kind, started_at, ended_at, logs=running.logs), snooze=snoozed.number,
                        snoozed_until=snoozed.until)
    # Logged (job.snoozed) and counted (outcome "snoozed") once the outcome is recorded.
    running.finished = _finished(job, ended_at - started_at, describe_decision(snoozed.decision))
    return Outcome(job["_id"], job["lock_token"], execution.attempt, executed=False, decision=snoozed.decision,
                   execution=execution)


def _finished(job: Document, took: timedelta, decision: str) -> JobFinished:
    """The attempt's event (its ``worker_id`` is the slot's, set by the slot loop): outcome ``snoozed``."""
    workable, group, tenant = job.get("workable"), job.get("group"), job.get("tenant")
    class_name = workable.get("class") if isinstance(workable, dict) else None
    return JobFinished(worker_id="", job_id=job["_id"], group=group if isinstance(group, str) else None,
                       tenant=tenant if isinstance(tenant, str) else None,
                       class_name=class_name if isinstance(class_name, str) else None, attempt=job.get("attempts"),
                       outcome=SNOOZED, duration_s=took.total_seconds(), decision=decision)
