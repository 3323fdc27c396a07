"""``recruiter jobs retry``: an archived job put back in the queue as a new job.

The copy is a new job (new ``_id``, ``queued``, due now, no attempt made, no
history, no result) that runs the same work the same way: the same workable,
group, tenant, tags, priority, retry policy, timeout and ``at_most_once``. It
names the job it copies in ``retry_of``. The archived original stays the record
of how it ended: only ``retried_as`` (the copy's id) and ``retried_at`` are added
to it, once, in the transaction that inserts the copy
(:func:`recruiter.store.retry_once`), so a job is retried at most once.

Invariant: pure, and a copy is only ever a job the checker of ``scheduled``
documents accepts (:func:`recruiter.domain.documents.job_problem`): an archived
document is untrusted (a job quarantined as ``malformed`` was archived as it
was found, and may hold anything), so one that cannot give a valid job is
refused with a one-line reason instead.
"""

from __future__ import annotations

from datetime import datetime
from typing import cast

from bson import ObjectId

from recruiter.domain.clock import utc
from recruiter.domain.documents import job_problem
from recruiter.domain.outcome import MALFORMED
from recruiter.domain.records import JobDoc, Raw

# The fields of the original a copy keeps (when present): what the job does and how it is run.
KEPT_FIELDS = ("group", "tenant", "tags", "priority", "workable", "retry_policy", "timeout_s", "at_most_once",
               "on_worker", "max_snoozes")


class RetryRefused(ValueError):
    """An archived document that cannot be put back in the queue; the message says why, in one line."""


def retry_copy(original: Raw, now: datetime, new_id: ObjectId | None = None) -> JobDoc:
    """The ``scheduled`` document that retries the archived job ``original``, due at ``now``.

    Raises :class:`RetryRefused` for a job quarantined as malformed, and for a
    document whose copy would not be a valid job.
    """
    job_id = original.get("_id")
    if original.get("why") == MALFORMED:
        reason = original.get("reason")
        detail = f" ({reason})" if isinstance(reason, str) and reason else ""
        raise RetryRefused(f"{job_id}: archived malformed{detail}; a quarantined job cannot be retried")
    now = utc(now)
    copy: dict[str, object] = {k: original[k] for k in KEPT_FIELDS if k in original}
    copy.update({
        "_id": new_id or ObjectId(),
        "done": False,
        "created_at": now,
        "scheduled_at": now,
        "locked": False,
        "attempts": 0,
        "crashes": 0,
        "status": "queued",
        "executions": [],
        "retry_of": job_id,
    })
    if copy.get("tenant") is None:
        copy["tenant"] = None
    on_worker = copy.get("on_worker")
    if isinstance(on_worker, dict):  # still aimed at its worker; a past deadline is not kept
        copy["on_worker"] = {k: v for k, v in on_worker.items() if k != "deadline"}
    problem = job_problem(copy)
    if problem is not None:
        raise RetryRefused(f"{job_id}: cannot be retried, its archived document has {problem}")
    return cast(JobDoc, copy)  # job_problem checked every field JobDoc promises
