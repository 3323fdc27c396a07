"""Resubmitting a job (the CouchDB jobs RFC's ``resubmit``): run it (once more) at a given time.

``rec.resubmit(job, at=None)``, by the state of the job:

- waiting (``queued``, ``delayed``, ``retrying``): rescheduled, due at ``at``
  (default: now). One conditional update (``locked: false``): if the recruiter
  locks the job first, the resubmit reads it again and takes the next branch;
- locked by a worker (``assigned``, ``running``): NOT halted. The job is flagged
  (``resubmit: {at, requested_at}``, by an update conditional on its lock token)
  and, when this attempt ends, the recruiter puts it back in the queue, due at
  ``at`` (or at once), instead of applying the attempt's decision: whatever that
  attempt's outcome (done, failed and to be retried, failed for good), the job runs
  once more. Its ``executions`` keep the attempt, ``resubmits`` counts the resubmits
  applied, and the extra run is an attempt like any other: its retry policy sees
  the job's attempts, this one included. Two resubmits while one attempt runs set
  the same flag: ONE more run (the later ``at`` wins). A resubmit that lands after
  the worker recorded its outcome but before the recruiter applied it still counts:
  the recruiter reads the flag where it writes (:func:`late_flag_filter`). If the
  attempt does not end (its worker dies, or stops and gives the job back), the
  job goes back to the queue anyway and that next run is the one asked for: the flag
  goes with the lock (``outcome.LOCK_FIELDS``);
- archived: refused (:class:`ResubmitRefused`): an archived job is never written
  again; ``recruiter jobs retry`` enqueues a copy of it;
- unknown: :class:`~recruiter.JobNotFound`.

Invariant: pure; the writes it plans are conditional on the state they were
planned from, so a resubmit never races the recruiter's lock or outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from bson import ObjectId

from recruiter.domain.dependencies import is_held
from recruiter.domain.records import Query, Raw

RESCHEDULED = "rescheduled"  # it was waiting: now due at ``at``
AFTER_ATTEMPT = "after-attempt"  # a worker has it: it runs once more when this attempt ends


class ResubmitRefused(ValueError):
    """The job cannot be resubmitted (it is archived); the message says why, in one line."""


@dataclass(frozen=True)
class Resubmitted:
    """What ``resubmit`` did: ``state`` is :data:`RESCHEDULED` or :data:`AFTER_ATTEMPT`."""

    job_id: ObjectId
    state: str
    at: datetime | None  # when it is due (rescheduled) or asked to run (after-attempt; None: at once)

    def describe(self) -> str:
        when = "at once" if self.at is None else self.at.isoformat().replace("+00:00", "Z")
        if self.state == RESCHEDULED:
            return f"{self.job_id}: rescheduled, due {when}"
        return f"{self.job_id}: runs once more after its current attempt ({when})"


@dataclass(frozen=True)
class ResubmitWrite:
    filter: Query
    update: Query
    result: Resubmitted


def plan_resubmit(job: Raw, at: datetime | None, now: datetime) -> ResubmitWrite:
    """The conditional update that resubmits ``job`` (a ``scheduled`` document) as read."""
    job_id = job["_id"]
    assert isinstance(job_id, ObjectId)
    if job.get("locked") is True:
        return ResubmitWrite(
            # $eq: the token read (untrusted) compared as a value, never read as operators.
            {"_id": job_id, "locked": True, "lock_token": {"$eq": job.get("lock_token")}},
            {"$set": {"resubmit": {"at": at, "requested_at": now}}},
            Resubmitted(job_id, AFTER_ATTEMPT, at))
    due = at or now
    if is_held(job):  # it waits for other jobs (recruiter.domain.dependencies): its due time once released
        return ResubmitWrite({"_id": job_id, "locked": False, "after.held": True}, {"$set": {"after.due_at": due}},
                             Resubmitted(job_id, RESCHEDULED, due))
    return ResubmitWrite({"_id": job_id, "locked": False}, {"$set": {"scheduled_at": due}},
                         Resubmitted(job_id, RESCHEDULED, due))


def refusal(job_id: object, archived: Raw) -> ResubmitRefused:
    why = archived.get("why")
    return ResubmitRefused(
        f"job {job_id} is archived ({why if isinstance(why, str) else '?'}) and cannot be resubmitted; "
        f"`recruiter jobs retry {job_id}` enqueues a copy of it")


def flagged(job: Raw) -> bool:
    """Whether a locked job carries a resubmit: its attempt's outcome puts it back in the queue."""
    return isinstance(job.get("resubmit"), dict)


def late_flag_filter() -> Query:
    """What a write applying an outcome adds to its filter: no resubmit (a job that has one
    is read again and resubmitted)."""
    return {"resubmit": {"$exists": False}}


def due_at(job: Raw, now: datetime) -> datetime:
    """When a flagged job is due again: the resubmit's ``at``, else ``now``."""
    flag = job.get("resubmit")
    at = flag.get("at") if isinstance(flag, dict) else None
    return at if isinstance(at, datetime) else now
