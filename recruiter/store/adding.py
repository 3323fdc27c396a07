"""The reads and writes of steps a running step adds to its workflow (:mod:`recruiter.domain.added`).

Invariant: called by the leader's round with the collections of its fenced transaction, so
the steps are written with the outcome that archives the job that added them, or not at all;
a dependent is made to wait for them only while it still waits for that job.
"""

from __future__ import annotations

from collections.abc import Sequence

from recruiter.store.dependencies import HELD
from recruiter.store.layout import Collections, Document
from recruiter.store.workflows import BY_WORKFLOW, HAS_WORKFLOW

STEP_FIELDS = {"workflow": 1, "why": 1, "retried_as": 1}


async def workflow_steps(c: Collections, workflow_id: object) -> list[tuple[Document, bool]]:
    """Every job of the workflow, (document, archived), ``scheduled`` first: their tags and whys."""
    where = {**HAS_WORKFLOW, "workflow.id": workflow_id}
    found = [(d, False) async for d in c.scheduled.find(where, STEP_FIELDS).hint(BY_WORKFLOW)]
    return found + [(d, True) async for d in c.archived.find(where, STEP_FIELDS).hint(BY_WORKFLOW)]


async def insert_steps(c: Collections, docs: Sequence[Document]) -> None:
    """Write the added steps (their ids are fresh: made by the round)."""
    if docs:
        await c.scheduled.insert_many(list(docs), ordered=True)


async def waiting_for(c: Collections, job_id: object) -> list[Document]:
    """The held jobs still waiting for ``job_id``: their ``after`` and ``workflow``."""
    return [d async for d in c.scheduled.find({"after.pending": job_id, **HELD}, {"after": 1, "workflow": 1})]


async def join(c: Collections, dependent: object, job_id: object, after: Document, deps: list[str] | None) -> bool:
    """Make ``dependent`` wait as ``after`` says (and name ``deps`` in its tag), if it still waits for ``job_id``."""
    set_: Document = {"after": after}
    if deps is not None:
        set_["workflow.deps"] = deps
    done = await c.scheduled.update_one({"_id": dependent, "after.pending": job_id, **HELD}, {"$set": set_})
    return done.modified_count == 1


