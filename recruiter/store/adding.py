"""The reads and writes of steps a running step adds to its workflow (:mod:`recruiter.domain.added`).

Invariant: called by the leader's round with the collections of its fenced transaction, so
the steps are written with the outcome that archives the job that added them, or not at all;
a dependent is made to wait for them only while it still waits for that job.
"""

from __future__ import annotations

from collections.abc import Sequence

from bson import ObjectId

from recruiter.domain.edges import MANIFEST
from recruiter.store.dependencies import HELD
from recruiter.store.edges import COUNTERS, insert_edges_async
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




async def join_counted(c: Collections, job_id: object, new: Sequence[object],
                       names: Sequence[str], workflow_id: object) -> int:
    """Make the dependents stored with edges (:mod:`recruiter.domain.edges`) that still wait for
    ``job_id`` wait for ``new`` too, with the policy their edge to ``job_id`` has: an edge each,
    the ids added to their list, their counters raised, and ``names`` added to the deps of a
    dependent of ``workflow_id``. How many dependents were joined."""
    joined = 0
    async for edge in c.edges.find({"upstream": job_id, "dependent": {"$exists": True}}):
        dep = edge.get("dependent")
        held = await c.scheduled.find_one({"_id": dep, **COUNTERS}, {"workflow": 1})
        if held is None:
            continue  # decided, cancelled or malformed: nothing waits here any more
        policy = edge.get("policy")
        await insert_edges_async(c, [{"_id": ObjectId(), "dependent": dep, "upstream": n,
                                      **({"policy": policy} if isinstance(policy, dict) else {})} for n in new])
        await c.edges.update_one({"_id": dep, MANIFEST: dep}, {"$addToSet": {"ids": {"$each": list(new)}}})
        update: Document = {"$inc": {"after.edges": len(new), "after.left": len(new)}}
        tag = held.get("workflow")
        if isinstance(tag, dict) and tag.get("id") == workflow_id and isinstance(tag.get("deps"), list):
            update["$set"] = {"workflow.deps": list(dict.fromkeys([*tag["deps"], *names]))}
        await c.scheduled.update_one({"_id": dep, **COUNTERS}, update)
        joined += 1
    return joined
