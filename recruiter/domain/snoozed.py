"""The leader's side of a snooze: the update that puts a snoozed job back in the queue (pure).

A worker's outcome is a snooze when its execution is of kind ``snoozed`` and numbered, and its
decision puts the job back (:func:`snooze_number`); the round then writes :func:`snooze_update`
instead of a plain reschedule: the same filter (the lock token: a stale worker's snooze matches
nothing) and the same give-back of the attempt, with the status the job had before it was locked
and its ``snoozes`` set to the snooze's number. See :mod:`recruiter.domain.snooze`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from recruiter.domain.job import Status
from recruiter.domain.outcome import reschedule_update
from recruiter.domain.records import Query, Raw
from recruiter.domain.snooze import SNOOZED, snoozes_of


def snooze_number(outcome_doc: Mapping[str, object]) -> int | None:
    """The number of the snooze an outcome (as read, checked by ``documents.outcome_problem``)
    records, when it is one that puts its job back in the queue; else None."""
    decision, execution = outcome_doc.get("decision"), outcome_doc.get("execution")
    if not isinstance(decision, Mapping) or "archive" in decision or not isinstance(execution, Mapping):
        return None
    number = execution.get("snooze")
    if execution.get("outcome") != SNOOZED or type(number) is not int or number < 1:
        return None
    return number


def snoozed_status(job: Mapping[str, object]) -> str:
    """The status of a snoozed job: ``queued`` while no attempt is counted, else ``retrying``."""
    attempts = job.get("attempts")
    return Status.QUEUED.value if type(attempts) is int and attempts <= 1 else Status.RETRYING.value


def snooze_update(job: Raw, outcome_doc: Raw, number: int) -> tuple[Query, Query]:
    """Filter and update that put ``job`` back in the queue at the end of its snooze (number
    ``number``): as any reschedule (fenced by the lock token, the attempt given back, the
    history kept), with its status as before the attempt and its ``snoozes`` counted."""
    filter_, update = reschedule_update(job, outcome_doc)
    # The worker numbered it from the ``snoozes`` it was sent; the history counts those a 0.2.0 leader applied.
    cast(Query, update["$set"]).update(status=snoozed_status(job), snoozes=max(number, snoozes_of(job) + 1))
    return filter_, update


def requeue_update(job: Raw, outcome_doc: Raw) -> tuple[Query, Query]:
    """Filter and update of an outcome that puts its job back in the queue: a snooze's
    (:func:`snooze_update`), else a retry's or a give-back's (``outcome.reschedule_update``)."""
    number = snooze_number(outcome_doc)
    return reschedule_update(job, outcome_doc) if number is None else snooze_update(job, outcome_doc, number)
