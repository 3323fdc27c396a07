"""What an assignment carries to each worker: a copy of its job, or a reference to it.

A worker's roster entry gets the job it is assigned as a copy (:func:`worker_copy`: the job less
its history), so it starts the job without reading it; a job too big to copy, or past what the
round's copies may take together, goes as a reference (:func:`recruiter.store.wakeup.job_reference`)
that the worker reads by ``_id``. A job handed out under a rate limit carries its start time.

Invariant: the assignment update stays far below MongoDB's 16 MiB command limit whatever the
round's size (at most ``MAX_ROUND_COPY_BYTES`` of copies, each at most ``MAX_JOB_COPY_BYTES``),
and the leader remembers a job it handed out only when the worker got a copy of it (:func:`handed_out`).
"""

from __future__ import annotations

import bson

from recruiter.domain.pacing import START_AT
from recruiter.domain.start_gate import GATE_FIELD, spec_document
from recruiter.processes.round_plan import Locked, RoundPlan
from recruiter.store.layout import Document
from recruiter.store.wakeup import is_copy, job_reference

# A job document bigger than this is not copied into the worker's roster entry:
# the entry gets a reference (recruiter.wakeup.job_reference), and the worker reads
# the job from ``scheduled`` by ``_id`` (one more read, for big jobs only).
MAX_JOB_COPY_BYTES = 64 * 1024
# The copies one assignment update carries, together, stay under this (the rest go as
# references), so the update stays far below the 16 MiB command limit whatever the round size.
MAX_ROUND_COPY_BYTES = 4 * 1024 * 1024


# What a worker never reads of a job, left out of the copy it gets: its history, whose
# executions carry earlier attempts' traces and logs (the recruiter keeps the whole job).
NOT_SENT_TO_WORKERS = ("executions", "last_execution")


def worker_copy(job: Document) -> Document:
    """``job`` as a worker gets it: without ``NOT_SENT_TO_WORKERS`` (``job`` itself when it has none)."""
    if not any(f in job for f in NOT_SENT_TO_WORKERS):
        return job
    return {k: v for k, v in job.items() if k not in NOT_SENT_TO_WORKERS}


def copies_to_send(locked: list[Locked]) -> list[Document]:
    """What each assignment carries in ``job``: the job as a worker needs it (:func:`worker_copy`),
    or a reference to it (:func:`recruiter.store.wakeup.job_reference`) when that is bigger than
    ``MAX_JOB_COPY_BYTES`` or the round's copies already reach ``MAX_ROUND_COPY_BYTES``."""
    budget = MAX_ROUND_COPY_BYTES
    out = []
    for lk in locked:
        copy = worker_copy(lk.job)
        size = len(bson.encode(copy))
        if size <= min(MAX_JOB_COPY_BYTES, budget):
            budget -= size
            out.append(copy)
        else:
            out.append(job_reference(lk.assignment.job_id, lk.token))
    return out


def handed_out(locked: list[Locked], copies: list[Document], assigned: set[str]) -> dict[object, Document]:
    """What the recruiter remembers of the jobs it handed out as copies: each job WHOLE (its
    history included, for the archive), not the worker's copy; big jobs are read again."""
    return {lk.assignment.job_id: lk.job for lk, copy in zip(locked, copies, strict=True)
            if lk.assignment.worker_id in assigned and is_copy(copy)}


def paced_copies(locked: list[Locked], plan: RoundPlan) -> list[Document]:
    """What each worker receives (:func:`copies_to_send`), the jobs handed out under a rate limit
    marked with their start times."""
    copies = copies_to_send(locked)
    if not plan.paced:
        return copies
    return [{**copy, **paced_fields(plan, lk.assignment.job_id)} if lk.assignment.job_id in plan.paced else copy
            for lk, copy in zip(locked, copies, strict=True)]


def paced_fields(plan: RoundPlan, job_id: object) -> dict[str, object]:
    """What a paced job's copy (or reference) carries: its start time, and the start gates its worker
    takes a token from (recruiter.domain.start_gate; a 0.2.0 worker ignores them)."""
    gates = plan.gates.get(job_id)
    return {START_AT: plan.paced[job_id], **({GATE_FIELD: spec_document(gates)} if gates else {})}


def picks_of(locked: list[Locked], copies: list[Document], ahead: set[str] | frozenset[str]) -> list[Document]:
    """The assignment's picks (:func:`recruiter.store.roster.assign`): each worker, its job, the
    copy or reference it receives, and its lock token if it was handed out ahead."""
    return [{"w": lk.assignment.worker_id, "j": lk.assignment.job_id, "job": copy,
             "a": lk.token if lk.assignment.worker_id in ahead else False}
            for lk, copy in zip(locked, copies, strict=True)]
