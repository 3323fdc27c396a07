"""Why a job is not running (``recruiter jobs explain``, ``jobs show``'s ``waiting`` line,
``Admin.explain``): the reads around one job, judged by :func:`recruiter.domain.waiting.explain`.

Invariant: a handful of indexed reads, whatever the number of jobs (no scan of the queue):
the job by ``_id`` (``archived``, then ``scheduled``); for a locked job the holder's roster
entry and heartbeat by ``_id``; for an unlocked, due job the pause switches (one document),
the roster entries that take its group and their heartbeats, the limits document (and,
when a limit names its group or tenant, the jobs locked in its group and the token state),
and the count of the ready jobs ahead of it, served by the ``candidates`` index and capped
at :data:`recruiter.domain.waiting.AHEAD_CAP` (at most five counts). A job not due yet
needs no read beyond its own document; a held step of a workflow, its first ten pending
deps by ``_id`` (to name them by step, :func:`recruiter.admin.workflow_view.waiting_on`). The
roster entries that take its group are checked as they are read (:mod:`recruiter.admin.roster`):
a malformed one is left out, as the recruiter skips it.
"""

from __future__ import annotations

from datetime import datetime

from recruiter.admin.roster import checked_entries
from recruiter.admin.workflow_view import with_steps
from recruiter.domain.following import JobView
from recruiter.domain.limits import count_locked, describe_key, held_line, keys_of, waiting_line
from recruiter.domain.pacing import state_from
from recruiter.domain.records import Raw
from recruiter.domain.stored_limits import read_limits
from recruiter.domain.waiting import (
    AHEAD_CAP,
    Ahead,
    Around,
    Explanation,
    HeldBy,
    ahead_filters,
    explain,
    needs_around,
    worker_fact,
)
from recruiter.store import (
    JobDocuments,
    SyncCollections,
    SyncDb,
    count_ahead,
    read_beats_of,
    read_cursor_document,
    read_entries_taking,
    read_entry_of,
    read_job_documents,
    read_limits_document,
    read_paused,
    read_running_in_sync,
)

HELD = "held by a limit: "  # how recruiter.domain.limits.waiting_line starts when a limit holds the job


def explain_job(db: SyncDb, job_id: object, now: datetime) -> Explanation | None:
    """Why job ``job_id`` is not running (None: no such job, neither waiting nor archived)."""
    c = SyncCollections.of(db)
    return _explain(c, read_job_documents(c, job_id), now)


def show_and_explain(db: SyncDb, job_id: object, now: datetime) -> tuple[JobView | None, Explanation | None]:
    """The job's view (``jobs show``) and why it is not running, from one read of its documents."""
    c = SyncCollections.of(db)
    docs = read_job_documents(c, job_id)
    view = docs.view(now)
    return view, (_explain(c, docs, now) if view is not None and not view.finished else None)


def held_by(c: SyncCollections, job: Raw, now: datetime) -> HeldBy | None:
    """The limit (flow control, :mod:`recruiter.domain.limits`) that holds ``job`` back now, if any:
    the limits document by ``_id``; only when a limit names the job's group or tenant, the jobs
    locked in its group (at most one per worker lane) and the token state (the cursor document)."""
    stored = read_limits(read_limits_document(c.metadata))
    limits, malformed = stored.limits, stored.malformed()
    group, tenant = str(job.get("group")), job.get("tenant")
    mine = keys_of(group, tenant if isinstance(tenant, str) else "")
    for key in mine:
        if key in malformed:
            return HeldBy(describe_key(key), held_line(key, malformed[key]).removeprefix(HELD))
    keys = [k for k in mine if k in limits.by_key]
    if not keys:
        return None
    running = count_locked(read_running_in_sync(c, [group]), limits)
    state, _ = state_from(read_cursor_document(c.metadata), now)
    for key in keys:
        limit = limits.by_key[key]
        bucket = state.bucket(key, limit.rate, now) if limit.rate is not None else None
        line = waiting_line(key, limit, running.get(key, 0), bucket, now)
        if line.startswith(HELD):
            return HeldBy(describe_key(key), line.removeprefix(HELD))
    return None


def _explain(c: SyncCollections, docs: JobDocuments, now: datetime) -> Explanation | None:
    return with_steps(c, docs.scheduled, _explain_job(c, docs, now))  # a workflow's step: by step name


def _explain_job(c: SyncCollections, docs: JobDocuments, now: datetime) -> Explanation | None:
    job = docs.scheduled
    if docs.archived is not None or job is None:
        return explain(docs.job_id, job, docs.archived, now)
    if job.get("locked") is True:
        holder = job.get("locked_by")
        entry = read_entry_of(c.roster, holder) if isinstance(holder, str) else None
        fact = worker_fact(entry, docs.beat, now) if entry is not None else None
        return explain(docs.job_id, job, None, now, holder=fact, beat=docs.beat)
    if not needs_around(job, now):
        return explain(docs.job_id, job, None, now)
    return explain(docs.job_id, job, None, now, around=_around(c, job, now))


def _around(c: SyncCollections, job: Raw, now: datetime) -> Around:
    paused = read_paused(c.metadata)
    entries, _ = checked_entries(read_entries_taking(c.roster, str(job.get("group"))))
    beats = read_beats_of(c.heartbeats, [e["_id"] for e in entries], {e["_id"]: e for e in entries})
    workers = tuple(worker_fact(e, beats.get(e["_id"]), now) for e in entries)
    count, capped = count_ahead(c.scheduled, ahead_filters(job, now), AHEAD_CAP)
    return Around(paused_groups=paused.groups, paused_tenants=paused.tenants, workers=workers,
                  ahead=Ahead(count, capped), held_by=held_by(c, job, now))
