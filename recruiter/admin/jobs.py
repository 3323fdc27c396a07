"""Single jobs for operators: list, show, retry archived ones, cancel.

Invariant: every read names its index (:func:`recruiter.store.ensure_indexes_sync`
first: a database no process of this version opened lacks them); a retry by ids
checks every job before it writes anything (one bad id and nothing changes,
:class:`RetryRefusedAll`); times are the caller's ``now`` (server time).
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
from recruiter.store import (
    Page,
    SyncCollections,
    SyncDb,
    archived_with_why,
    cancel_job,
    ensure_indexes_sync,
    insert_jobs,
    read_job_documents,
    read_retry_originals,
)
from recruiter.store import list_jobs as read_page

INSERT_BATCH = 500


class RetryRefusedAll(ValueError):
    """A retry by ids that names a job it cannot retry: the message says which and why; nothing was retried."""


@dataclass(frozen=True)
class RetriedJob:
    id: object  # the new job's
    retry_of: object  # the archived original's


@dataclass(frozen=True)
class Retried:
    """The jobs put back (new ids), and the reasons of those skipped (archived malformed: not retriable)."""

    jobs: tuple[RetriedJob, ...]
    skipped: tuple[str, ...] = ()


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
    """Put the archived jobs ``job_ids`` back as new jobs (an id given twice is retried once).

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
    return _insert(c, copies, [])


def retry_archived(db: SyncDb, why: str, since: datetime, group: str | None, limit: int | None,
                   now: datetime) -> Retried:
    """Put back every job archived with ``why`` since ``since`` (of ``group``; at most ``limit``, newest first).

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
    return _insert(c, copies, skipped)


def _insert(c: SyncCollections, copies: list[JobDoc], skipped: list[str]) -> Retried:
    for start in range(0, len(copies), INSERT_BATCH):
        insert_jobs(c, copies[start:start + INSERT_BATCH])
    return Retried(tuple(RetriedJob(d["_id"], d.get("retry_of")) for d in copies), tuple(skipped))


def cancel_jobs(db: SyncDb, job_ids: Sequence[ObjectId], now: datetime,
                reason: str | None = None) -> list[CancelResult]:
    """Cancel each job (archived as ``cancelled``; a worker running one halts it); one result per id, in order.

    Raises RuntimeError if a job kept changing under the cancel (the jobs before it are cancelled).
    """
    return [cancel_job(db, job_id, now, reason) for job_id in job_ids]
