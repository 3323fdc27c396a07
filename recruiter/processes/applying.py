"""Applying the outcomes workers recorded: archive, reschedule, or resubmit (a round's step 2).

Invariant: each job is written under the lock its outcome was produced for (the
lock token in every filter), and a job resubmitted while its attempt ran goes
back to the queue whatever the outcome (:mod:`recruiter.domain.resubmit`), even
when the resubmit came after the round read (or remembered) the job: the
archive's delete and the reschedule match only jobs without a resubmit, and a
job they miss is read again, in the round's transaction, and resubmitted (the
archived copy the round wrote of it taken back in the same transaction). A
resubmit that commits after the transaction's snapshot conflicts with its
write, and the round is run again. Idempotent: the archive is an upsert, every
other write is conditional on the lock token.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

import structlog

from recruiter.domain.added import Addition
from recruiter.domain.events import JobArchived, OutcomeApplied
from recruiter.domain.outcome import archived_document, held_by, is_archive, resubmit_update
from recruiter.domain.resubmit import flagged
from recruiter.domain.snoozed import requeue_update
from recruiter.domain.timeline import applied_event
from recruiter.domain.workflow import workflow_name
from recruiter.processes.adding import add_steps, noted
from recruiter.processes.dependencies import after_archive
from recruiter.processes.logs import AfterCommit
from recruiter.store import archived, scheduled
from recruiter.store.layout import Collections, Document

log = structlog.get_logger("recruiter.recruiter")


@dataclass
class Sorted:
    """The outcomes of a round, sorted by what they do to their jobs."""

    locks: dict[object, object] = field(default_factory=dict)  # job id -> the outcome's lock token
    outcomes: dict[object, Document] = field(default_factory=dict)  # job id -> the outcome
    archive: list[Document] = field(default_factory=list)  # archived copies to write
    reschedule: list[scheduled.Change] = field(default_factory=list)
    resubmit: list[scheduled.Change] = field(default_factory=list)
    applied: list[OutcomeApplied] = field(default_factory=list)  # for the history over time, once committed


def sort_outcomes(outcomes: dict[object, tuple[str, Document]], jobs: dict[object, Document],
                  now: datetime) -> Sorted:
    """What each outcome does to its job (as read or remembered), pure; stale ones are skipped."""
    out = Sorted()
    for job_id, (worker_id, outcome) in outcomes.items():
        job = jobs.get(job_id)
        if job is None or not held_by(job, outcome):
            # Already applied by an earlier round, or the lock was taken away.
            log.info("outcome.stale", job_id=str(job_id), worker_id=worker_id)
            continue
        out.locks[job_id], out.outcomes[job_id] = outcome["token"], outcome
        out.applied.append(applied_event(job, outcome, now))
        if flagged(job):
            out.resubmit.append(resubmit_update(job, outcome, now))
        elif is_archive(outcome):
            out.archive.append(archived_document(job, outcome, now))
        else:
            out.reschedule.append(requeue_update(job, outcome))  # a retry, a give-back or a snooze
    return out


async def apply_sorted(c: Collections, s: Sorted, now: datetime, events: AfterCommit,
                       fault: Callable[[str], None], *, dependents: bool = True,
                       additions: Mapping[object, Addition] | None = None) -> int:
    """Write ``s`` on ``c``; how many jobs were archived, rescheduled or resubmitted. With
    ``dependents`` (some job may wait for others), the archived jobs release their dependents;
    ``additions``: the steps the jobs archived done add (:mod:`recruiter.processes.adding`),
    written before that release."""
    late: list[Document] = []
    additions = additions or {}
    if s.archive:
        noted(s.archive, additions)
        written = await archived.archive(c.archived, s.archive)
        fault("archive.between_insert_and_delete")
        locks = [(d["_id"], s.locks[d["_id"]]) for d in s.archive]
        if await scheduled.delete_archived(c.scheduled, locks) < len(locks):
            late += await resubmitted_late(c, locks, written)
        gone = {d["_id"] for d in late}
        await add_steps(c, [a for d in s.archive if d["_id"] not in gone and (a := additions.get(d["_id"]))], events)
        for d in s.archive:
            if d["_id"] not in gone:
                # Logged as job.archived by the log subscriber, once the round commits.
                events.emit(JobArchived(d["_id"], d["why"], d.get("attempts"), d.get("group"), by="recruiter",
                                        workflow=workflow_name(d.get("workflow"))))
        if dependents:
            await after_archive(c, [d for d in s.archive if d["_id"] not in gone], now, events.emit)
    if s.reschedule and await scheduled.apply_changes(c.scheduled, s.reschedule) < len(s.reschedule):
        late += await resubmitted_late(c, [(f["_id"], f["lock_token"]) for f, _ in s.reschedule], set())
    resubmit = s.resubmit + [resubmit_update(j, s.outcomes[j["_id"]], now) for j in late]
    if resubmit:
        await scheduled.apply_changes(c.scheduled, resubmit)
        for f, _ in resubmit:
            events.info("job.resubmitted", job_id=str(f["_id"]))
    for event in s.applied:
        events.emit(event)
    return len(s.archive) + len(s.reschedule) + len(s.resubmit)


async def resubmitted_late(c: Collections, locks: list[tuple[object, object]], written: set[object]) -> list[Document]:
    """Of the jobs in ``locks`` whose delete or reschedule did not match, those resubmitted after
    the round read them, read again; the archived copies this round wrote of them are taken back."""
    late = await scheduled.read_resubmitted(c.scheduled, locks)
    await archived.take_back(c.archived, [d["_id"] for d in late if d["_id"] in written])
    return late
