"""What the workflow pages show, made from the read model (:mod:`recruiter.admin.workflow_view`).

A workflow's steps as rows in dependency order (every step after the steps it waits for),
each with the states of its deps; the summary of a cancel or a retry (what the flash and the
audit entry say), counted from the outcome of each step the admin function reports.

Invariant: pure, and never raises on data. A step's document is untrusted: a field the
page shows that cannot be read is named in the row's ``problems`` (shown as malformed),
never a failure of the page; a job whose ``workflow`` field is malformed is set aside by
the read model and shown with its reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bson import ObjectId

from recruiter.admin.workflow_view import StepView, WorkflowView
from recruiter.admin.workflows import KEPT, PRUNED, RETRIED, RETRIED_BEFORE, StepDone
from recruiter.domain.cancel import ALREADY_ARCHIVED, FINISHING, NOT_FOUND, RUNS_ON, WAS_ASSIGNED, WAS_WAITING
from recruiter.domain.workflow import WorkflowTag, parse_workflow

UNKNOWN = "unknown"  # the state of a dep no job of the workflow is named after
NAMED = 5  # the steps a summary names per outcome (the audit keeps the summary; the page shows each step)
EARLIER_SHOWN = 5  # the previous jobs of a retried step linked from its row
MAX_DEPTH = 20  # the indentation of the tree stops growing here


@dataclass(frozen=True)
class StepRow:
    """One step as the workflow's page shows it."""

    name: str
    depth: int
    callback: str | None
    state: str
    job_id: str
    deps: tuple[tuple[str, str], ...]  # (step name, its state) of each step it waits for
    ended: bool
    attempts: int | None
    reason: str | None
    worker: str | None
    earlier: tuple[str, ...]  # its previous jobs' ids, the newest last (retried since)
    earlier_more: int
    problems: tuple[str, ...] = ()  # fields of its document that could not be read

    @property
    def failed(self) -> bool:
        return self.ended and self.state != "done"


@dataclass(frozen=True)
class AsideRow:
    """A job of the workflow whose ``workflow`` field is malformed: its id (a link when it is one) and why."""

    job_id: str
    link: bool
    reason: str


def _problems(doc: Mapping[str, Any], archived: bool) -> tuple[str, ...]:
    found = []
    attempts = doc.get("attempts")
    if "attempts" in doc and (not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 0):
        found.append("attempts: not a whole number")
    if archived and not isinstance(doc.get("why"), str):
        found.append("why: not a text")
    if "reason" in doc and doc.get("reason") is not None and not isinstance(doc.get("reason"), str):
        found.append("reason: not a text")
    return tuple(found)


def _attempts(doc: Mapping[str, Any]) -> int | None:
    value = doc.get("attempts")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def step_rows(view: WorkflowView) -> list[StepRow]:
    """The steps in dependency order, each indented under the deepest step it waits for."""
    states = {s.name: s.state for s in view.steps}
    depth: dict[str, int] = {}
    rows = []
    for s in view.steps:
        depth[s.name] = min(MAX_DEPTH, 1 + max((depth.get(d, 0) for d in s.deps), default=-1))
        rows.append(_row(s, depth[s.name], states))
    return rows


def _row(s: StepView, depth: int, states: Mapping[str, str]) -> StepRow:
    earlier = [str(i) for i in s.earlier]
    deps = tuple((d, states.get(d, UNKNOWN)) for d in s.deps)
    return StepRow(s.name, depth, s.callback, s.state, str(s.job_id), deps, s.archived, _attempts(s.doc), s.reason,
                   s.worker, tuple(earlier[-EARLIER_SHOWN:]), max(0, len(earlier) - EARLIER_SHOWN),
                   _problems(s.doc, s.archived))


def object_id_of(raw: str) -> ObjectId | None:
    """The id a page's text names (a workflow's, a job's), or None if it cannot be one (24 hexadecimal digits)."""
    return ObjectId(raw) if len(raw) == 24 and ObjectId.is_valid(raw) else None


def aside_rows(view: WorkflowView) -> list[AsideRow]:
    return [AsideRow(job_id, object_id_of(job_id) is not None, reason) for job_id, reason in view.set_aside]


def tag_of(document: Mapping[str, Any]) -> WorkflowTag | str | None:
    """A job's workflow (its page links it), the reason its ``workflow`` field is malformed, or None."""
    if "workflow" not in document:
        return None
    return parse_workflow(document.get("workflow"))


def _names(done: Sequence[StepDone]) -> str:
    names = ", ".join(d.step for d in done[:NAMED])
    return names + (f" and {len(done) - NAMED} more" if len(done) > NAMED else "")


def _summary(done: Iterable[StepDone], labels: Mapping[str, str]) -> str:
    by: dict[str, list[StepDone]] = {}
    for d in done:
        by.setdefault(d.outcome if d.outcome in labels else "", []).append(d)
    parts = []
    for outcome, label in labels.items():
        steps = by.get(outcome, [])
        if steps:
            parts.append(f"{len(steps)} {'step' if len(steps) == 1 else 'steps'} {label}: {_names(steps)}")
    return "; ".join(parts)


# In the order the summary says them: what was done first, what was not last.
CANCEL_LABELS = {
    WAS_WAITING: "cancelled (waiting in the queue)",
    WAS_ASSIGNED: "cancelled, halted by the worker that had it at its next heartbeat",
    RUNS_ON: "cancelled, still running in its worker's thread until it returns (its outcome discarded)",
    ALREADY_ARCHIVED: "already ended, left as they were",
    FINISHING: "not cancelled: its worker had already recorded its outcome",
    NOT_FOUND: "not cancelled: no such job any more",
    "": "with an outcome not known to this dashboard",
}
RETRY_LABELS = {
    RETRIED: "retried as new jobs",
    KEPT: "kept as they were",
    RETRIED_BEFORE: "not retried: retried before (retry the workflow's newer jobs)",
    PRUNED: "not retried: the job is no longer archived (pruned)",
    "": "with an outcome not known to this dashboard",
}


def cancel_summary(done: Sequence[StepDone]) -> str:
    """``2 steps cancelled (waiting in the queue): a, b; 1 step already ended, ...: c``."""
    return _summary(done, CANCEL_LABELS) or "no step"


def retry_summary(done: Sequence[StepDone]) -> str:
    """``1 step retried as new jobs: fetch; 2 steps kept as they were: ...``."""
    return _summary(done, RETRY_LABELS) or "no step"
