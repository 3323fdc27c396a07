"""Workflows for operators: cancel one, retry its failed steps (``recruiter workflows cancel|retry``).

Cancel goes through the cancel of one job (:func:`recruiter.store.cancel_job`) for every step
not ended yet, dependents first (so a step that would run anyway, ``if_failed="run"``, is
cancelled before its upstream's cancel could release it): a waiting step is archived
``cancelled``, a running one halted where its worker can halt it (the cancel's own
report says which). Retry goes through the retry of archived jobs
(:func:`recruiter.store.retry_once`, at most one copy per original): the failed step,
and every step downstream of it that did not end done, are copied as new jobs of the
same workflow, in one transaction, each waiting for its deps' current jobs (a dep done
already counts at once), so the retried step's dependents resume after it.

Invariant: every step is reported, by name, with what happened to it; a refusal is one
line and writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from bson import ObjectId

from recruiter.admin.workflow_view import StepView, WorkflowView, read_workflow
from recruiter.domain.cancel import ALREADY_ARCHIVED
from recruiter.domain.dependencies import held_fields, parse_after, settle
from recruiter.domain.dependency_policy import CANCEL_ALL, Policy
from recruiter.domain.edges import shared_policy
from recruiter.domain.records import JobDoc
from recruiter.domain.requeue import RetryRefused, retry_copy
from recruiter.domain.workflow import downstream, parse_workflow, topological
from recruiter.store import SyncCollections, SyncDb, cancel_job, retry_once
from recruiter.store.dependencies import archived_whys, existing_ids
from recruiter.store.workflows import archived_by_ids


class WorkflowActionRefused(ValueError):
    """A workflow action that cannot be done as asked: one line, nothing changed."""


# What a retry did to a step (StepDone.outcome); a cancel's outcome is its cancel's state
# (recruiter.domain.cancel: cancelled, halted, running-on, finishing, already-archived, not-found).
RETRIED, KEPT, PRUNED, RETRIED_BEFORE = "retried", "kept", "pruned", "retried-before"


@dataclass(frozen=True)
class StepDone:
    """What an action did to one step: its name, one line, and the outcome's name (to count them by)."""

    step: str
    what: str
    job_id: ObjectId | None = None  # the step's job (for retry: its new job, when one was made)
    outcome: str = ""

    def describe(self) -> str:
        return f"{self.step}: {self.what}"


def _found(db: SyncDb, workflow_id: ObjectId) -> WorkflowView:
    view = read_workflow(db, workflow_id)
    if view is None or not view.steps:
        raise WorkflowActionRefused(f"no workflow {workflow_id} (recruiter workflows list shows them); "
                                    "nothing changed")
    return view


def cancel_workflow(db: SyncDb, workflow_id: ObjectId, now: datetime, reason: str | None = None) -> list[StepDone]:
    """Cancel every step not ended yet (dependents first); one line per step, in the workflow's order."""
    view = _found(db, workflow_id)
    done: dict[str, StepDone] = {}
    for step in reversed(view.steps):
        if step.archived:
            done[step.name] = StepDone(step.name, f"not cancelled, already ended ({step.state})", step.job_id,
                                       ALREADY_ARCHIVED)
            continue
        result = cancel_job(db, step.job_id, now, reason or f"workflow {workflow_id} cancelled")
        done[step.name] = StepDone(step.name, result.describe().removeprefix(f"{step.job_id}: "), step.job_id,
                                   result.state)
    return [done[s.name] for s in view.steps]


def retry_workflow(db: SyncDb, workflow_id: ObjectId, now: datetime, step: str | None = None) -> list[StepDone]:
    """Retry ``step`` (or every failed step) and the steps downstream of it that did not end done;
    one line per step of the workflow. :class:`WorkflowActionRefused` (nothing written) when
    there is nothing to retry or a copy cannot be made."""
    view = _found(db, workflow_id)
    deps = {s.name: s.deps for s in view.steps}
    targets = _targets(view, deps, step)
    order = [s for s in view.steps if s.name in targets and s.failed]
    c = SyncCollections.of(db)
    originals = archived_by_ids(c, [s.job_id for s in order])
    new_ids = {s.name: ObjectId() for s in order}
    current = {s.name: s.job_id for s in view.steps}
    copies = [_copy(s, originals.get(s.job_id), new_ids, current, now) for s in order]
    _settle(c, copies)
    written = {w.original: w for w in retry_once(db, [cast(JobDoc, d) for d in copies], now)}
    lines: list[StepDone] = []
    for s in view.steps:
        if s.name not in new_ids:
            lines.append(StepDone(s.name, f"kept ({s.state})", s.job_id, KEPT))
            continue
        w = written.get(s.job_id)
        if w is None or w.copy is None:
            lines.append(StepDone(s.name, f"not retried: job {s.job_id} is no longer archived (pruned)",
                                  outcome=PRUNED))
        elif w.already:
            lines.append(StepDone(s.name, f"not retried: job {s.job_id} was retried before, as {w.copy}", None,
                                  RETRIED_BEFORE))
        else:
            waits = f", waits for {', '.join(s.deps)}" if s.deps else ""
            lines.append(StepDone(s.name, f"retried as {w.copy} (it ended {s.state}){waits}", ObjectId(str(w.copy)),
                                  RETRIED))
    return lines


def _targets(view: WorkflowView, deps: dict[str, tuple[str, ...]], step: str | None) -> set[str]:
    if step is not None:
        found = view.step(step)
        if found is None:
            raise WorkflowActionRefused(f"workflow {view.id} has no step {step!r}; nothing changed")
        if not found.failed:
            raise WorkflowActionRefused(f"step {step!r} is {found.state}: only a step that ended other than done "
                                        "can be retried; nothing changed")
        return downstream(step, deps)
    failed = [s.name for s in view.steps if s.failed]
    if not failed:
        raise WorkflowActionRefused(f"workflow {view.id} has no failed step; nothing changed")
    return set().union(*(downstream(f, deps) for f in failed))


def _copy(step: StepView, original: dict[str, Any] | None, new_ids: dict[str, ObjectId],
          current: dict[str, ObjectId], now: datetime) -> dict[str, Any]:
    if original is None:
        raise WorkflowActionRefused(f"step {step.name!r}: job {step.job_id} is no longer archived; nothing changed")
    try:
        copy: dict[str, Any] = dict(retry_copy(original, now, new_ids[step.name]))
    except RetryRefused as exc:
        raise WorkflowActionRefused(f"step {step.name!r}: {exc}; nothing changed") from None
    tag = parse_workflow(original.get("workflow"))
    if isinstance(tag, str):
        raise WorkflowActionRefused(f"step {step.name!r}: {tag}; nothing changed")
    copy["workflow"] = original["workflow"]
    if step.deps:
        ids = [new_ids.get(d) or current[d] for d in step.deps if d in new_ids or d in current]
        # Its policy as stored (a step has one for all its deps); its state new, waiting on the current jobs.
        policy = _policy_of(original)
        copy.update(held_fields([(i, policy) for i in ids], now, copy["_id"]))
    return copy


def _policy_of(original: dict[str, Any]) -> Policy:
    """The policy an archived step waited with (the first dependency's: a step has one for all);
    cancel-on-anything when its ``after`` cannot be read."""
    if (shared := shared_policy(original.get("after"))) is not None:  # stored with edges
        return shared
    parsed = parse_after(original.get("after"), original.get("_id"))
    if isinstance(parsed, str):
        return CANCEL_ALL
    if parsed.policies:
        return next(iter(parsed.policies.values()))
    return parsed.default_policy()


def _settle(c: SyncCollections, copies: list[dict[str, Any]]) -> None:
    own = {d["_id"] for d in copies}
    wanted = list({i: None for d in copies if isinstance(d.get("after"), dict)
                   for i in d["after"]["ids"] if i not in own})
    known = existing_ids(c, wanted) if wanted else set()
    problem = settle(copies, known, archived_whys(c, [i for i in wanted if i in known]) if wanted else {})
    if problem:
        raise WorkflowActionRefused(f"{problem}; nothing changed")


def step_names(view: WorkflowView) -> list[str]:
    """The steps in order (every step after its deps)."""
    return topological([s.name for s in view.steps], {s.name: s.deps for s in view.steps})
