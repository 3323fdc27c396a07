"""Workflows and batches: named steps enqueued as one unit (pure, no I/O).

A workflow is a set of named steps, each a job, each waiting (through ``after``,
:mod:`recruiter.domain.dependencies`) for the earlier steps it names in ``deps``. Before
anything is written its shape is checked here: unique step names, every dep an earlier
step of the same workflow (so the steps form a DAG: no cycle can be written), at most
:data:`MAX_STEPS` steps. Every step is stored with the field ``workflow``, readable in
``mongosh``::

    workflow: {id: ObjectId(...),       # the workflow's id (shared by its steps)
               name: "monthly-report",  # its kind: what `recruiter workflows list` groups by
               step: "total",           # the step's name, unique in its workflow
               deps: ["part-1", ...],   # the steps it waits for, by name (their ids: after.ids)
               kind: "workflow"}        # or "batch"; a batch's callbacks add callback: "on_success"

The field is information: no process decides when a job runs from it (a 0.2.0 process ignores
it; the ``after`` field does the waiting). Views, and the round applying the steps a running step
added (:mod:`recruiter.domain.added`), read it as untrusted input: :func:`parse_workflow` returns
the reason a malformed one is set aside (its steps refused). An added step's field also names
the step that added it, ``added_by``.

A batch (Sidekiq's) is a workflow of kind ``batch``: its jobs have no deps, its
``on_complete`` callback waits for them all and runs whatever happened
(``if_failed="run"``), its ``on_success`` callback waits for them all and is archived
``upstream-failed``, naming the failed job, if one did not end done.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeGuard

from bson import ObjectId

from recruiter.domain.job import JobRefused

MAX_STEPS = 10_000
STEP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,99}$")
KINDS = ("workflow", "batch")
# The name metrics give a step whose stored tag is malformed (no workflow name starts with "(").
MALFORMED = "(malformed)"
CALLBACKS = ("on_success", "on_complete")


class WorkflowRefused(JobRefused):
    """A workflow that cannot be written: one line, nothing written."""


@dataclass(frozen=True)
class StepSpec:
    """One step as declared: its name, the steps it waits for, and what their failure means."""

    name: str
    deps: tuple[str, ...] = ()
    if_failed: str = "cancel"
    callback: str | None = None
    on: tuple[tuple[str, str], ...] | None = None  # per-outcome fates (JobBuilder.after's ``on``)


@dataclass(frozen=True)
class WorkflowTag:
    """A stored ``workflow`` field, checked."""

    id: ObjectId
    name: str
    step: str
    deps: tuple[str, ...]
    kind: str
    callback: str | None = None


def is_name(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a workflow's or a step's name (:data:`STEP_NAME`); untrusted input welcome."""
    return isinstance(value, str) and STEP_NAME.match(value) is not None


def check_name(what: str, name: object) -> str:
    if not is_name(name):
        raise WorkflowRefused(f"{what} must be 1 to 100 letters, digits or _ . : - (starting with a letter or digit), "
                              f"got {name!r:.60}")
    return name


def check_shape(steps: Sequence[StepSpec]) -> None:
    """Unique names, deps naming steps of the workflow, no cycle, 1 to :data:`MAX_STEPS` steps
    (:class:`WorkflowRefused`, one line naming the step or the cycle)."""
    if not steps:
        raise WorkflowRefused("a workflow needs at least one step; nothing was written")
    if len(steps) > MAX_STEPS:
        raise WorkflowRefused(f"a workflow has at most {MAX_STEPS} steps, got {len(steps)}; nothing was written")
    index: dict[str, int] = {}
    for k, step in enumerate(steps):
        if step.name in index:
            raise WorkflowRefused(f"two steps are named {step.name!r}; nothing was written")
        index[step.name] = k
    for step in steps:
        for dep in step.deps:
            if dep not in index:
                raise WorkflowRefused(f"step {step.name!r} depends on {dep!r}: no such step; nothing was written")
    deps = {s.name: s.deps for s in steps}
    order = topological([s.name for s in steps], deps, strict=True)
    if len(order) < len(steps):
        stuck = next(s.name for s in steps if s.name not in set(order))
        cycle = cycle_through(steps, index, stuck) or stuck
        raise WorkflowRefused(f"steps wait for each other in a cycle: {cycle}; nothing was written")


def cycle_through(steps: Sequence[StepSpec], index: Mapping[str, int], start: str) -> str | None:
    """A cycle of deps through ``start`` (``a -> b -> a``), or None."""
    path: list[str] = []
    seen: set[str] = set()

    def walk(name: str) -> bool:
        if name in path:
            path.append(name)
            return True
        if name in seen:
            return False
        seen.add(name)
        path.append(name)
        if any(walk(d) for d in steps[index[name]].deps if d in index):
            return True
        path.pop()
        return False

    if not walk(start):
        return None
    first = path.index(path[-1])
    return " -> ".join(path[first:])


def workflow_field(workflow_id: ObjectId, name: str, step: StepSpec, kind: str) -> dict[str, object]:
    """The ``workflow`` field a step is stored with."""
    out: dict[str, object] = {"id": workflow_id, "name": name, "step": step.name, "deps": list(step.deps),
                              "kind": kind}
    if step.callback is not None:
        out["callback"] = step.callback
    return out


def parse_workflow(raw: object) -> WorkflowTag | str:
    """A stored ``workflow`` field, checked (untrusted input), or the reason it is set aside."""
    if not isinstance(raw, Mapping):
        return "workflow: not a document"
    wid, name, step, deps, kind = (raw.get(k) for k in ("id", "name", "step", "deps", "kind"))
    if not isinstance(wid, ObjectId):
        return "workflow.id: not an ObjectId"
    for what, value in (("name", name), ("step", step)):
        if not is_name(value):
            return f"workflow.{what}: not a name"
    if not (isinstance(deps, list) and len(deps) <= MAX_STEPS and all(isinstance(d, str) for d in deps)):
        return "workflow.deps: not a list of step names"
    if kind not in KINDS:
        return f"workflow.kind: not one of {', '.join(KINDS)}"
    callback = raw.get("callback")
    if callback is not None and callback not in CALLBACKS:
        return f"workflow.callback: not one of {', '.join(CALLBACKS)}"
    return WorkflowTag(wid, str(name), str(step), tuple(deps), str(kind),
                       callback if isinstance(callback, str) else None)


def workflow_name(raw: object) -> str | None:
    """The name (kind) of the workflow a job's stored ``workflow`` field tags it with: None for a
    job without the field, :data:`MALFORMED` for a malformed one (never raises)."""
    if raw is None:
        return None
    tag = parse_workflow(raw)
    return MALFORMED if isinstance(tag, str) else tag.name


def topological(names: Sequence[str], deps: Mapping[str, Sequence[str]], *, strict: bool = False) -> list[str]:
    """``names`` ordered so every step comes after its deps (ties: as given). Steps in a cycle
    (stored documents written by hand) never loop: they are appended as given, or with
    ``strict`` left out."""
    placed: list[str] = []
    done: set[str] = set()
    known = set(names)
    left = list(names)
    while left:
        ready = [n for n in left if all(d in done or d not in known for d in deps.get(n, ()))]
        if not ready:
            placed += [] if strict else left
            break
        for n in ready:
            done.add(n)
        placed += ready
        left = [n for n in left if n not in done]
    return placed


def downstream(start: str, deps: Mapping[str, Sequence[str]]) -> set[str]:
    """``start`` and every step that waits for it, directly or not."""
    out = {start}
    grew = True
    while grew:
        grew = False
        for name, ds in deps.items():
            if name not in out and any(d in out for d in ds):
                out.add(name)
                grew = True
    return out
