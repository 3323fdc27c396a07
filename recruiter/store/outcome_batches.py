"""Several slots' outcomes (and ``started`` marks) in one command: the writes of a worker's completer.

:func:`outcome_ops` builds the writes of one slot's outcome (and of the next job's mark),
exactly those of :func:`recruiter.store.outcome_writes.record_outcome_and_mark`: each fenced
by its entry's session and its assignment. :func:`write_together` sends the writes of several
slots as one unordered ``bulk_write`` (not a retryable write, as each alone:
:mod:`recruiter.store.unrecorded`).

Invariant: nothing here decides what a write that did not match means. :func:`write_together`
says True only when every write of the command matched (so each slot's writes landed, as each
alone would have said); otherwise (one matched nothing, or the driver or the server refused
one) it says None, and each slot writes its own again alone, where a write that had landed
matches nothing and is looked into by its lock token as after a lost reply. A connection error
is raised, as for a write alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from bson import ObjectId

from recruiter.domain.batching import QUIET
from recruiter.domain.records import Query
from recruiter.store import unrecorded
from recruiter.store.layout import AsyncColl
from recruiter.store.outcome_writes import _REFUSALS, _mark_write, _outcome_write

Write = tuple[Query, Query]


def outcome_ops(slot_id: str, session: ObjectId, job_id: object, outcome: Query, *, stopping: bool,
                now: datetime, mark: tuple[str, ObjectId, object, object] | None = None,
                quiet: object = None) -> list[Write]:
    """The writes of one slot's outcome, and of the ``started`` mark of its next job (``mark``: its
    lane, that lane's session, the job id, its lock token), each fenced as when written alone.
    ``quiet`` (the job's lock token; None: not quiet) is set in the entry with the outcome, so that the
    write wakes no leader (:func:`recruiter.domain.batching.quiet_outcome`, :mod:`recruiter.store.doorbell`)."""
    query, update = _outcome_write(slot_id, session, job_id, outcome, stopping=stopping, now=now)
    if quiet is not None:
        sets = update["$set"]
        update = {**update, "$set": {**(sets if isinstance(sets, dict) else {}), QUIET: quiet}}
    ops = [(query, update)]
    if mark is not None:
        ops.append(_mark_write(*mark))
    return ops


async def write_together(roster: AsyncColl, writes: Sequence[Write]) -> bool | None:
    """Send ``writes`` in one command: True if every one matched, None if that is not known of
    each (see the module doc). Connection errors are raised."""
    if not writes:
        return True
    try:
        result = await roster.bulk_write([unrecorded.update_model(q, u) for q, u in writes], ordered=False)
    except _REFUSALS:
        return None
    return True if result.matched_count == len(writes) else None
