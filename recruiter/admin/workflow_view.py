"""Workflows for operators (``recruiter workflows list|show``, ``jobs explain`` of a step): the read model.

A workflow is the set of jobs whose ``workflow.id`` is its id (:mod:`recruiter.domain.workflow`),
in ``scheduled`` and ``archived``, read through the ``by_workflow`` index of each. A step
retried (``workflows retry``) has several documents; its newest (by ``created_at``) is the
step's current one. A document whose ``workflow`` field is malformed is set aside with its
reason (``set_aside``), never a failure of the view.

Invariant: reads only; every state shown is read from the job's own documents.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from bson import ObjectId

from recruiter.domain.edges import is_counted
from recruiter.domain.waiting import Explanation, Waiting
from recruiter.domain.workflow import MALFORMED, WorkflowTag, is_name, parse_workflow, topological
from recruiter.store import SyncCollections, SyncDb
from recruiter.store.edges import front_sync
from recruiter.store.workflows import queued_workflow_names, step_documents, workflow_documents, workflow_groups

DONE = "done"
# The states of a step still to end, as :func:`step_state` names them.
PENDING = ("waiting", "queued", "retrying", "running")
SHOWN = 10  # the pending deps ``jobs explain`` names


@dataclass(frozen=True)
class StepView:
    """One step's current job and state: ``waiting`` (for its deps), ``queued``, ``retrying``,
    ``running``, or the ``why`` it was archived with (``done``, ``upstream-failed``...)."""

    name: str
    job_id: ObjectId
    state: str
    deps: tuple[str, ...]
    archived: bool
    reason: str | None = None
    worker: str | None = None
    callback: str | None = None
    earlier: tuple[ObjectId, ...] = ()  # the ids of its previous jobs (retried since)
    doc: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def failed(self) -> bool:
        return self.archived and self.state != DONE


@dataclass(frozen=True)
class WorkflowView:
    id: ObjectId
    name: str
    kind: str
    steps: tuple[StepView, ...]
    set_aside: tuple[tuple[str, str], ...] = ()  # (job id, reason) of documents whose workflow field is malformed

    def counts(self, jobs_only: bool = False) -> dict[str, int]:
        """done / failed / pending (a batch's progress with ``jobs_only``: its callbacks left out)."""
        steps = [s for s in self.steps if not (jobs_only and s.callback)]
        return {"done": sum(s.state == DONE for s in steps), "failed": sum(s.failed for s in steps),
                "pending": sum(not s.archived for s in steps), "total": len(steps)}

    @property
    def state(self) -> str:
        """``running`` while a step has not ended, else ``done`` (all done) or ``failed``."""
        c = self.counts()
        return "running" if c["pending"] else ("failed" if c["failed"] else "done")

    def step(self, name: str) -> StepView | None:
        return next((s for s in self.steps if s.name == name), None)


def step_state(doc: Mapping[str, Any], archived: bool) -> str:
    if archived:
        why = doc.get("why")
        return why if isinstance(why, str) else "archived"
    after = doc.get("after")
    if isinstance(after, Mapping) and after.get("held") is True:
        return "waiting"
    if doc.get("locked") is True:
        return "running"
    return "retrying" if isinstance(doc.get("attempts"), int) and doc["attempts"] > 0 else "queued"


def _newest(docs: Iterable[tuple[Mapping[str, Any], bool, WorkflowTag]]) -> dict[str, list[tuple[Any, ...]]]:
    by_step: dict[str, list[tuple[Any, ...]]] = {}
    for doc, archived, tag in docs:
        by_step.setdefault(tag.step, []).append((doc, archived, tag))
    for entries in by_step.values():  # the current job last; a queued copy wins over an archived original
        entries.sort(key=lambda e: (_when(e[0].get("created_at")), not e[1]))
    return by_step


def _when(value: object) -> float:
    return value.timestamp() if isinstance(value, datetime) else float("-inf")


def read_workflow(db: SyncDb | SyncCollections, workflow_id: ObjectId) -> WorkflowView | None:
    """The workflow ``workflow_id`` with every step's current state (None: no job of it)."""
    c = db if isinstance(db, SyncCollections) else SyncCollections.of(db)
    found = workflow_documents(c, workflow_id)
    return view_of(workflow_id, found)


def view_of(workflow_id: ObjectId, found: Iterable[tuple[Mapping[str, Any], bool]]) -> WorkflowView | None:
    """The view from the documents read (pure); documents with a malformed field are set aside."""
    tagged: list[tuple[Mapping[str, Any], bool, WorkflowTag]] = []
    aside: list[tuple[str, str]] = []
    for doc, archived in found:
        tag = parse_workflow(doc.get("workflow"))
        if isinstance(tag, str):
            aside.append((str(doc.get("_id")), tag))
        else:
            tagged.append((doc, archived, tag))
    if not tagged:
        return WorkflowView(workflow_id, "?", "workflow", (), tuple(aside)) if aside else None
    steps = []
    newest = _newest(tagged)  # in the order the steps were declared (their first job's id)
    for name, entries in sorted(newest.items(), key=lambda kv: min(str(e[0].get("_id")) for e in kv[1])):
        doc, archived, tag = entries[-1]
        if not isinstance(doc.get("_id"), ObjectId):
            aside.append((str(doc.get("_id")), "_id: not an ObjectId"))
            continue
        worker = doc.get("locked_by") if not archived and isinstance(doc.get("locked_by"), str) else None
        reason = doc.get("reason") if isinstance(doc.get("reason"), str) else None
        steps.append(StepView(name, doc["_id"], step_state(doc, archived), tag.deps, archived, reason, worker,
                              tag.callback, tuple(e[0]["_id"] for e in entries[:-1]), doc))
    order = topological([s.name for s in steps], {s.name: s.deps for s in steps})
    by_name = {s.name: s for s in steps}
    first = tagged[0][2]
    return WorkflowView(workflow_id, first.name, first.kind, tuple(by_name[n] for n in order), tuple(aside))


@dataclass(frozen=True)
class WorkflowRow:
    """One line of ``workflows list``: counts of the jobs stored with its id (retried copies included)."""

    id: ObjectId
    name: str
    kind: str
    created_at: datetime | None
    jobs: int
    pending: int
    done: int
    failed: int

    @property
    def state(self) -> str:
        return "running" if self.pending else ("failed" if self.failed else "done")


@dataclass(frozen=True)
class KindStats:
    """``workflows stats``: the workflows of one name (kind) by state, and their jobs."""

    name: str
    workflows: int
    running: int
    done: int
    failed: int
    jobs_done: int
    jobs_failed: int
    jobs_pending: int


def stats_by_name(rows: Iterable[WorkflowRow]) -> list[KindStats]:
    """Per workflow name, from the rows of :func:`list_workflows` (pure)."""
    by: dict[str, list[WorkflowRow]] = {}
    for r in rows:
        by.setdefault(r.name, []).append(r)
    return [KindStats(name, len(rs), sum(r.state == "running" for r in rs), sum(r.state == "done" for r in rs),
                      sum(r.state == "failed" for r in rs), sum(r.done for r in rs), sum(r.failed for r in rs),
                      sum(r.pending for r in rs)) for name, rs in sorted(by.items())]


def list_workflows(db: SyncDb, limit: int | None) -> tuple[list[WorkflowRow], int]:
    """The newest ``limit`` workflows (by id), and how many jobs were set aside for a malformed
    ``workflow`` field. Counts are of jobs (a retried step counts its original and its copy);
    ``workflows show`` tells steps apart."""
    c = SyncCollections.of(db)
    rows: dict[ObjectId, dict[str, Any]] = {}
    aside = 0
    for g, archived in workflow_groups(c):
        if not isinstance(g["_id"], ObjectId) or not isinstance(g.get("name"), str):
            aside += int(g.get("jobs") or 0)
            continue
        row = rows.setdefault(g["_id"], {"name": g["name"], "kind": g.get("kind"), "created_at": None,
                                         "jobs": 0, "pending": 0, "done": 0, "failed": 0})
        created = g.get("created_at")
        if isinstance(created, datetime) and (row["created_at"] is None or created < row["created_at"]):
            row["created_at"] = created
        row["jobs"] += g["jobs"]
        if archived:
            row["done"] += g["done"]
            row["failed"] += g["jobs"] - g["done"]
        else:
            row["pending"] += g["jobs"]
    newest = sorted(rows, reverse=True)[:limit]  # None: all
    return [WorkflowRow(i, rows[i]["name"], str(rows[i]["kind"]), rows[i]["created_at"], rows[i]["jobs"],
                        rows[i]["pending"], rows[i]["done"], rows[i]["failed"]) for i in newest], aside


def running_by_name(db: SyncDb) -> dict[str, int]:
    """The ``running`` column of :func:`stats_by_name` (the workflows with a job not ended), read from
    ``scheduled`` alone: its cost is that of the queue, never of the archive. A workflow whose id or
    name is malformed counts under :data:`MALFORMED`."""
    out: dict[str, int] = {}
    for g in queued_workflow_names(SyncCollections.of(db)):
        name, n = g["_id"].get("name"), g.get("n")
        if not (g["_id"].get("ok") is True and is_name(name)):
            name = MALFORMED
        out[name] = out.get(name, 0) + (n if isinstance(n, int) else 0)
    return out


def with_steps(c: SyncCollections, job: Mapping[str, Any] | None, out: Explanation | None) -> Explanation | None:
    """``jobs explain`` of a held step: its pending deps named by step, with their states."""
    if out is None or job is None or out.code != Waiting.WAITING_FOR_JOBS:
        return out
    line = waiting_on(c, job)
    return replace(out, text=line) if line else out


def waiting_on(db: SyncDb | SyncCollections, job: Mapping[str, Any]) -> str | None:
    """For a held step: ``waiting on step X (running), Y (queued)``, naming its pending deps (the
    first :data:`SHOWN`, read by ``_id``) by step; None if ``job`` is not a held step."""
    tag = parse_workflow(job.get("workflow"))
    after = job.get("after")
    if isinstance(tag, str) or not (isinstance(after, Mapping) and after.get("held") is True):
        return None
    c = db if isinstance(db, SyncCollections) else SyncCollections.of(db)
    if is_counted(after):  # stored with edges: the first of its edges left (recruiter.domain.edges)
        pending: list[Any] = list(front_sync(c, job.get("_id"), SHOWN))
        left = after.get("left")
        total = left if isinstance(left, int) else len(pending)
    else:
        listed = after.get("pending")
        if not isinstance(listed, list):
            return None
        pending, total = listed, len(listed)
    ids = [p for p in pending[:SHOWN] if isinstance(p, ObjectId)]
    found = step_documents(c, ids) if ids else {}
    parts = [_named(i, found.get(i)) for i in ids]
    if not parts:
        return None
    more = f" and {total - len(parts)} more" if total > len(parts) else ""
    return f"waiting on step {', '.join(parts)}{more}"


def _named(job_id: ObjectId, found: tuple[Mapping[str, Any], bool] | None) -> str:
    if found is None:
        return f"job {job_id} (gone)"
    doc, archived = found
    tag = parse_workflow(doc.get("workflow"))
    name = tag.step if not isinstance(tag, str) else f"job {job_id}"
    return f"{name} ({step_state(doc, archived)})"
