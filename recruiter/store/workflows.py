"""The reads of workflows (:mod:`recruiter.domain.workflow`): a workflow's jobs, and counts per workflow.

Invariant: every read names the ``by_workflow`` index of its collection (its partial filter,
``workflow`` present, is in every filter, so a malformed field is found too and set aside by
the caller, :mod:`recruiter.admin.workflow_view`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from recruiter.store.layout import Document, SyncCollections

BY_WORKFLOW = "by_workflow"
HAS_WORKFLOW: Document = {"workflow": {"$exists": True}}
# What the views read of a step's job.
STEP_FIELDS = {"workflow": 1, "why": 1, "locked": 1, "locked_by": 1, "status": 1, "after": 1, "created_at": 1,
               "archived_at": 1, "reason": 1, "scheduled_at": 1, "retry_of": 1, "retried_as": 1, "attempts": 1}


def workflow_documents(c: SyncCollections, workflow_id: object) -> list[tuple[Document, bool]]:
    """Every job of the workflow, (document, archived), ``scheduled`` first."""
    where = {**HAS_WORKFLOW, "workflow.id": workflow_id}
    found = [(d, False) for d in c.scheduled.find(where, STEP_FIELDS).hint(BY_WORKFLOW)]
    return found + [(d, True) for d in c.archived.find(where, STEP_FIELDS).hint(BY_WORKFLOW)]


def workflow_groups(c: SyncCollections) -> Iterator[tuple[dict[str, Any], bool]]:
    """Per workflow id and per collection: its name, kind, first ``created_at``, its jobs and those done."""
    pipeline: list[Document] = [
        {"$match": HAS_WORKFLOW},
        {"$group": {"_id": "$workflow.id", "name": {"$first": "$workflow.name"}, "kind": {"$first": "$workflow.kind"},
                    "created_at": {"$min": "$created_at"}, "jobs": {"$sum": 1},
                    "done": {"$sum": {"$cond": [{"$eq": ["$why", "done"]}, 1, 0]}}}},
    ]
    for coll, archived in ((c.scheduled, False), (c.archived, True)):
        for group in coll.aggregate(pipeline, hint=BY_WORKFLOW):
            yield group, archived


def queued_workflow_names(c: SyncCollections) -> Iterator[Document]:
    """Per workflow name (``_id.name``) and whether the workflows' ids are ObjectIds (``_id.ok``), how
    many workflows have a job in ``scheduled`` (``n``): the cost of the jobs in the queue, never of
    the archive; one document per name."""
    pipeline: list[Document] = [
        {"$match": HAS_WORKFLOW},
        {"$group": {"_id": "$workflow.id", "name": {"$first": "$workflow.name"}}},
        {"$group": {"_id": {"name": "$name", "ok": {"$eq": [{"$type": "$_id"}, "objectId"]}}, "n": {"$sum": 1}}},
    ]
    yield from c.scheduled.aggregate(pipeline, hint=BY_WORKFLOW)


def archived_by_ids(c: SyncCollections, ids: Sequence[object]) -> dict[object, Document]:
    """The archived jobs ``ids``, whole, by id."""
    return {d["_id"]: d for d in c.archived.find({"_id": {"$in": list(ids)}})}


def step_documents(c: SyncCollections, ids: Sequence[object]) -> dict[object, tuple[Document, bool]]:
    """The jobs ``ids`` (a step's pending deps) by id, (document, archived): ``scheduled`` first."""
    found = {d["_id"]: (d, False) for d in c.scheduled.find({"_id": {"$in": list(ids)}}, STEP_FIELDS)}
    rest = [i for i in ids if i not in found]
    if rest:
        found |= {d["_id"]: (d, True) for d in c.archived.find({"_id": {"$in": rest}}, STEP_FIELDS)}
    return found
