"""Single jobs for operators: list, show, retry archived ones, cancel, retry now (end a backoff), delete.

Invariant: every read names its index (:func:`recruiter.store.ensure_indexes_sync`
first: a database no process of this version opened lacks them); a retry by ids
checks every job before it writes anything (one bad id and nothing changes,
:class:`RetryRefusedAll`); a job is retried at most once, checked by the server
(:func:`recruiter.store.retry_once`): retrying it again returns its copy, as
``already``; times are the caller's ``now`` (server time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from bson import ObjectId

from recruiter.domain.cancel import CancelResult
from recruiter.domain.following import JobView
from recruiter.domain.listing import JobFilter, PageKey
from recruiter.domain.records import JobDoc
from recruiter.domain.requeue import RetryRefused, retry_copy
from recruiter.domain.waiting_actions import ActionResult
from recruiter.store import (
    Page,
    SyncCollections,
    SyncDb,
    archived_with_why,
    cancel_job,
    delete_waiting,
    ensure_indexes_sync,
    read_job_documents,
    read_retry_originals,
    retry_now,
    retry_once,
)
from recruiter.store import list_jobs as read_page

RETRY_BATCH = 100  # copies per transaction


class RetryRefusedAll(ValueError):
    """A retry by ids that names a job it cannot retry: the message says which and why; nothing was retried."""


@dataclass(frozen=True)
class RetriedJob:
    id: object  # the copy's
    retry_of: object  # the archived original's

    def describe(self, already: bool = False) -> str:
        return f"{self.retry_of}: {'already retried' if already else 'retried'} as {self.id}"


@dataclass(frozen=True)
class Retried:
    """The jobs put back (new ids), those an earlier retry had put back (``already``: their copies,
    nothing written), and the reasons of those skipped (archived malformed, or pruned meanwhile)."""

    jobs: tuple[RetriedJob, ...]
    skipped: tuple[str, ...] = ()
    already: tuple[RetriedJob, ...] = ()

    def describe(self) -> str:
        """One line: ``retried as X``, ``already retried as X``, or the counts of each."""
        if len(self.jobs) + len(self.already) == 1:
            return (f"retried as {self.jobs[0].id}" if self.jobs else f"already retried as {self.already[0].id}")
        parts = [f"retried {len(self.jobs)}" + (f" (as {' '.join(str(j.id) for j in self.jobs)})"
                                                  if 0 < len(self.jobs) <= 3 else "")]
        if self.already:
            parts.append(f"{len(self.already)} already retried (as {' '.join(str(j.id) for j in self.already[:3])}"
                         + (" ...)" if len(self.already) > 3 else ")"))
        if self.skipped:
            parts.append(f"{len(self.skipped)} skipped")
        return ", ".join(parts)


# The databases whose indexes this process made sure of (by client and name): a long-lived front end (the
# dashboard) lists jobs many times, and each check is one command per collection.
_ENSURED: set[tuple[int, str]] = set()


def ensure_indexes_once(db: SyncDb) -> None:
    """:func:`recruiter.store.ensure_indexes_sync`, once per database and client in this process."""
    key = (id(db.client), db.name)
    if key not in _ENSURED:
        ensure_indexes_sync(db)
        _ENSURED.add(key)


def list_jobs(db: SyncDb, f: JobFilter, after: PageKey | None, limit: int, now: datetime) -> Page:
    """Up to ``limit`` jobs selected by ``f``, newest first, after the page key ``after``; ``next`` keys the rest."""
    ensure_indexes_once(db)
    return read_page(SyncCollections.of(db), f, after, limit, now)


def show_job(db: SyncDb, job_id: object, now: datetime) -> JobView | None:
    """The job, waiting, running or archived, with its executions (None: no such job)."""
    return read_job_documents(SyncCollections.of(db), job_id).view(now)


def retry_jobs(db: SyncDb, job_ids: Sequence[object], now: datetime) -> Retried:
    """Put the archived jobs ``job_ids`` back as new jobs (an id given twice is retried once); a job
    retried before is not copied again: its copy is in ``already``.

    Raises :class:`RetryRefusedAll` if one is waiting, unknown or not retriable: nothing is written then.
    """
    ids = list(dict.fromkeys(job_ids))
    c = SyncCollections.of(db)
    archived, waiting = read_retry_originals(c, ids, now)
    copies = []
    for job_id in ids:
        if job_id in waiting:
            raise RetryRefusedAll(f"{job_id} is not archived (it is {waiting[job_id].state}); "
                                  "only archived jobs can be retried; nothing was retried")
        if job_id not in archived:
            raise RetryRefusedAll(f"no archived job {job_id}; nothing was retried")
        try:
            copies.append(retry_copy(archived[job_id], now))
        except RetryRefused as exc:
            raise RetryRefusedAll(f"{exc}; nothing was retried") from None
    return _insert(db, copies, [], now)


def retry_archived(db: SyncDb, why: str, since: datetime, group: str | None, limit: int | None,
                   now: datetime) -> Retried:
    """Put back every job archived with ``why`` since ``since`` (of ``group``; at most ``limit``, newest first)
    that was not retried yet (a copy that failed again is retried, not its original).

    Jobs archived malformed (quarantined) are skipped, with their reason. One read on the ``by_why`` index.
    """
    ensure_indexes_once(db)
    c = SyncCollections.of(db)
    copies: list[JobDoc] = []
    skipped: list[str] = []
    for doc in archived_with_why(c, why, since, group, limit):
        try:
            copies.append(retry_copy(doc, now))
        except RetryRefused as exc:
            skipped.append(str(exc))
    return _insert(db, copies, skipped, now)


def _insert(db: SyncDb, copies: list[JobDoc], skipped: list[str], now: datetime) -> Retried:
    made: list[RetriedJob] = []
    already: list[RetriedJob] = []
    for start in range(0, len(copies), RETRY_BATCH):
        for w in retry_once(db, copies[start:start + RETRY_BATCH], now):
            if w.copy is None:
                skipped.append(f"{w.original}: no longer archived (pruned since it was read)")
            else:
                (already if w.already else made).append(RetriedJob(w.copy, w.original))
    return Retried(tuple(made), tuple(skipped), tuple(already))


def cancel_jobs(db: SyncDb, job_ids: Sequence[ObjectId], now: datetime,
                reason: str | None = None) -> list[CancelResult]:
    """Cancel each job (archived as ``cancelled``; a worker running one halts it); one result per id, in order.

    Raises RuntimeError if a job kept changing under the cancel (the jobs before it are cancelled).
    """
    return [cancel_job(db, job_id, now, reason) for job_id in job_ids]


def retry_now_jobs(db: SyncDb, job_ids: Sequence[ObjectId], now: datetime) -> list[ActionResult]:
    """End the backoff of each job waiting for its next attempt (``retrying``, due later): due ``now``.
    One result per id, in order; a job already due, or in another state, is left as it is and says so."""
    return [retry_now(db, job_id, now) for job_id in job_ids]


def delete_jobs(db: SyncDb, job_ids: Sequence[ObjectId], now: datetime,
                reason: str | None = None) -> list[ActionResult]:
    """Delete each waiting job (archived as ``deleted``, it never runs); a job a worker holds is refused.
    One result per id, in order."""
    return [delete_waiting(db, job_id, now, reason) for job_id in job_ids]
