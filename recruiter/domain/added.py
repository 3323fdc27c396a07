"""Dynamic workflows, the leader's side: the steps an outcome adds, checked and planned (pure, no I/O).

A worker whose attempt added steps (:mod:`recruiter.domain.adding`) and ended done writes an
outcome whose decision archives the job ``steps-not-added`` (:data:`STEPS_NOT_ADDED`, with
:data:`NOT_ADDED_REASON`) and whose ``steps`` field lists the steps. A leader of this release
reads the steps (:func:`parse_added`, untrusted input), checks them against the workflow as
stored (:func:`plan_additions`: a name some step already has, a dep naming no step, the
workflow's size, a join that would wait for itself) and then, in the round's transaction,
archives the job ``done`` and writes the steps; or, refused, archives the job
``steps-refused`` (:data:`STEPS_REFUSED`) with the reason, and writes nothing of them.

Skew: a 0.2.0 leader knows nothing of ``steps``: it applies the decision as written, and the
job is archived ``steps-not-added``, saying why, never ``done`` as if its steps were added (its
dependents see an outcome ``failed``). Added steps are ordinary jobs in the ordinary stored form
(``after``, ``workflow``), so every release runs and releases them as any other step.

Each added step is stored with ``workflow.added_by``: the name of the step that added it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import bson
from bson import ObjectId

from recruiter.domain.adding import MAX_ADDED_BYTES, MAX_ADDED_STEPS
from recruiter.domain.dependencies import IF_FAILED, held_fields, settle
from recruiter.domain.dependency_policy import Policy, PolicyRefused, checked_policy
from recruiter.domain.documents import job_problem
from recruiter.domain.outcome import LOCK_FIELDS
from recruiter.domain.workflow import MAX_STEPS, WorkflowTag, downstream, is_name, parse_workflow

STEPS_NOT_ADDED = "steps-not-added"
STEPS_REFUSED = "steps-refused"
NOT_ADDED_REASON = ("it added workflow steps, which a leader of release 0.2.0 cannot add: they were not added "
                    "(retry it once every leader runs 0.3.0 or later)")
# Fields of a job the round sets itself, whatever the worker sent.
_ROUNDS_OWN = ("_id", "after", "unique", "workflow", "crash_pending", "why", "result", "archived_at", *LOCK_FIELDS)


@dataclass(frozen=True)
class AddedStep:
    """One added step as read from an outcome, checked."""

    name: str
    deps: tuple[str, ...]
    policy: Policy
    hold: bool
    job: Mapping[str, Any]


@dataclass
class Existing:
    """The workflow's steps as stored: each name's current job, deps, and what has ended."""

    ids: dict[str, ObjectId] = field(default_factory=dict)
    deps: dict[str, tuple[str, ...]] = field(default_factory=dict)
    ended: dict[object, object] = field(default_factory=dict)  # archived job id -> why


@dataclass(frozen=True)
class Addition:
    """What an outcome adds, ready to write: the steps' documents, and the ids (and names) its
    held dependents also wait for."""

    job_id: object
    docs: list[dict[str, Any]]
    held_ids: list[ObjectId]
    held_names: list[str]


def is_adding(outcome: Mapping[str, object]) -> bool:
    """Whether an outcome (checked by ``documents.outcome_problem``) asks to add steps."""
    decision = outcome.get("decision")
    return "steps" in outcome and isinstance(decision, Mapping) and decision.get("archive") == STEPS_NOT_ADDED


def _step(raw: object, own: str) -> AddedStep | str:
    if not isinstance(raw, Mapping):
        return "a step is not a document"
    name, deps, job = raw.get("name"), raw.get("deps"), raw.get("job")
    if not is_name(name):
        return f"a step's name is not a name: {name!r:.60}"
    if not (isinstance(deps, list) and len(deps) <= MAX_STEPS and all(is_name(d) for d in deps)):
        return f"step {name!r}: deps is not a list of step names"
    if not isinstance(job, Mapping) or not isinstance(raw.get("hold", False), bool):
        return f"step {name!r}: its job is not a document"
    if_failed, on = raw.get("if_failed", "cancel"), raw.get("on")
    if if_failed not in IF_FAILED or not (on is None or isinstance(on, Mapping)):
        return f"step {name!r}: its if_failed or on is malformed"
    try:
        policy = checked_policy(str(if_failed), on)
    except (PolicyRefused, TypeError) as exc:
        return f"step {name!r}: {exc}"
    return AddedStep(name, tuple(dict.fromkeys(d for d in deps if d != own)), policy, raw.get("hold") is True, job)


def parse_added(raw: object, own: str) -> list[AddedStep] | str:
    """The steps an outcome's ``steps`` field adds (``own``: the adding step's name), or why they are refused."""
    if not isinstance(raw, list) or not 0 < len(raw) <= MAX_ADDED_STEPS:
        return f"steps: not a list of 1 to {MAX_ADDED_STEPS} steps"
    try:
        size = len(bson.encode({"steps": raw}))
    except Exception as exc:  # noqa: BLE001 - untrusted input
        return f"steps: cannot be encoded ({type(exc).__name__})"
    if size > MAX_ADDED_BYTES + 64 * len(raw):
        return f"steps: {size} bytes, more than the {MAX_ADDED_BYTES} one attempt may add"
    out: list[AddedStep] = []
    for item in raw:
        step = _step(item, own)
        if isinstance(step, str):
            return step
        if step.name == own or any(s.name == step.name for s in out):
            return f"step {step.name!r} is added twice"
        out.append(step)
    return out


def existing_of(docs: Sequence[tuple[Mapping[str, Any], bool]]) -> Existing:
    """The workflow's steps from its jobs, (document, archived), ``scheduled`` first: a step's
    current job is the queued one, else the archived one not retried (a malformed tag is skipped)."""
    out = Existing()
    for doc, archived in docs:
        tag = parse_workflow(doc.get("workflow"))
        if isinstance(tag, str) or not isinstance(doc.get("_id"), ObjectId):
            continue
        if archived:
            out.ended[doc["_id"]] = doc.get("why")
        if tag.step not in out.ids or (archived and out.ids[tag.step] in out.ended and not doc.get("retried_as")):
            out.ids[tag.step], out.deps[tag.step] = doc["_id"], tag.deps
    return out


def plan_additions(tag: WorkflowTag, job_id: object, steps: Sequence[AddedStep], existing: Existing,
                   now: datetime) -> Addition | str:
    """The documents of ``steps`` added by job ``job_id`` (step ``tag.step``), or why they are refused."""
    problem = _shape_problem(tag, steps, existing)
    if problem:
        return problem
    ids = {**existing.ids, **{s.name: ObjectId() for s in steps}}
    docs = [_document(tag, s, ids, now) for s in steps]
    known: set[object] = set(existing.ids.values())
    problem = settle(docs, known, {i: existing.ended[i] for i in known if i in existing.ended})
    if problem:
        return problem
    for s, doc in zip(steps, docs, strict=True):
        if bad := job_problem(doc):
            return f"step {s.name!r}: its job is not valid: {bad}"
    held = [s for s in steps if s.hold]
    return Addition(job_id, docs, [ids[s.name] for s in held], [s.name for s in held])


def _shape_problem(tag: WorkflowTag, steps: Sequence[AddedStep], existing: Existing) -> str | None:
    if len(existing.ids) + len(steps) > MAX_STEPS:
        return f"a workflow has at most {MAX_STEPS} steps; it has {len(existing.ids)} and {len(steps)} were added"
    added: set[str] = set()
    below = downstream(tag.step, existing.deps) - {tag.step} if any(s.hold for s in steps) else set()
    for s in steps:
        if s.name in existing.ids:
            return f"step {s.name!r}: the workflow already has a step of that name"
        for dep in s.deps:
            if dep not in added and dep not in existing.ids:
                return f"step {s.name!r} depends on {dep!r}: no such step (nor one added before it)"
            if dep in below:
                return (f"step {s.name!r} waits for {dep!r}, which waits for {tag.step!r}: with hold_dependents "
                        f"that is a cycle")
        added.add(s.name)
    return None


def _document(tag: WorkflowTag, step: AddedStep, ids: Mapping[str, ObjectId], now: datetime) -> dict[str, Any]:
    doc: dict[str, Any] = {k: v for k, v in step.job.items() if k not in _ROUNDS_OWN}
    doc.update(_id=ids[step.name], done=False, locked=False, attempts=0, crashes=0, status="queued", executions=[])
    # Due as long after the round's time as it was after its building (schedule_in), by the leader's clock.
    built, due = doc.get("created_at"), doc.get("scheduled_at")
    delay = due - built if isinstance(built, datetime) and isinstance(due, datetime) else None
    doc.update(created_at=now, scheduled_at=now + max(delay, timedelta()) if delay is not None else due)
    doc["workflow"] = {"id": tag.id, "name": tag.name, "step": step.name, "deps": list(step.deps),
                       "kind": tag.kind, "added_by": tag.step}
    if step.deps:
        due = doc.get("scheduled_at")
        doc.update(held_fields([(ids[d], step.policy) for d in step.deps], due if isinstance(due, datetime) else now,
                               doc["_id"]))
    return doc


def joined_after(after: Mapping[str, Any], job_id: object, new: Sequence[ObjectId]) -> dict[str, Any]:
    """A dependent's ``after`` once it also waits for ``new`` (added by job ``job_id``, which it
    waits for), with the policy it has for ``job_id``."""
    out = dict(after)
    out["ids"] = list(after["ids"]) + [i for i in new if i not in after["ids"]]
    out["pending"] = list(after["pending"]) + [i for i in new if i not in after["pending"]]
    if isinstance(after.get("on"), list):
        out["on"] = [{**g, "ids": list(g["ids"]) + list(new)} if isinstance(g, Mapping) and job_id in g.get("ids", ())
                     else g for g in after["on"]]
    return out
