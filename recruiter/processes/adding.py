"""The round's part in dynamic workflows: the steps an outcome adds, checked, then written.

:func:`checked_additions` runs before the round sorts its outcomes: each outcome that adds steps
(:func:`recruiter.domain.added.is_adding`) for a job still under its lock is checked against its
workflow as stored, read in the round's transaction; accepted, its decision becomes ``done`` and
its steps are kept to write; refused, its decision becomes ``steps-refused`` with the reason, and
nothing of them is written. :func:`add_steps` writes the accepted ones, in the same transaction,
after the archive and before the archived jobs release their dependents: a dependent held for the
added steps (``hold_dependents``) is still waiting when its upstream's end is applied.

Invariant: never raises on what a worker wrote; idempotent like the rest of the round (an
outcome applied once no longer matches its job's lock; an aborted round wrote nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from recruiter.domain.added import (
    STEPS_REFUSED,
    Addition,
    existing_of,
    is_adding,
    joined_after,
    parse_added,
    plan_additions,
)
from recruiter.domain.dependencies import parse_after
from recruiter.domain.outcome import DONE, held_by
from recruiter.domain.workflow import parse_workflow
from recruiter.processes.logs import AfterCommit
from recruiter.store import adding
from recruiter.store.layout import Collections, Document


async def checked_additions(c: Collections, outcomes: dict[object, tuple[str, Document]],
                            jobs: Mapping[object, Document], now: datetime, events: AfterCommit
                            ) -> dict[object, Addition]:
    """The steps each outcome adds, by job id; the outcomes that add steps are rewritten in
    ``outcomes``: ``done`` when accepted, ``steps-refused`` (with why) when not."""
    out: dict[object, Addition] = {}
    for job_id, (worker_id, outcome) in list(outcomes.items()):
        job = jobs.get(job_id)
        if not is_adding(outcome) or job is None or not held_by(job, outcome):
            continue  # a stale outcome is skipped by the sort
        plan = await _plan(c, job, outcome, now, list(out.values()))
        if isinstance(plan, str):
            events.warning("job.steps_refused", job_id=str(job_id), worker_id=worker_id, reason=plan)
            decision: Document = {"archive": STEPS_REFUSED, "reason": f"the steps it added were refused: {plan}"}
        else:
            decision, out[job_id] = {"archive": DONE}, plan
        outcomes[job_id] = (worker_id, {**outcome, "decision": decision})
    return out


async def _plan(c: Collections, job: Document, outcome: Document, now: datetime,
                planned: list[Addition]) -> Addition | str:
    """The steps ``outcome`` adds, checked against its workflow as stored and the steps this round
    already planned (two steps of one workflow adding a step of one name in one round: the second refused)."""
    tag = parse_workflow(job.get("workflow"))
    if isinstance(tag, str):
        return f"the job is not a step of a workflow ({tag})"
    steps = parse_added(outcome.get("steps"), tag.step)
    if isinstance(steps, str):
        return steps
    docs = await adding.workflow_steps(c, tag.id)
    docs += [(d, False) for a in planned for d in a.docs if d["workflow"]["id"] == tag.id]
    return plan_additions(tag, job["_id"], steps, existing_of(docs), now)


def noted(archive: list[Document], additions: Mapping[object, Addition]) -> None:
    """The archived copies of the jobs that added steps name them (``added_steps``)."""
    for doc in archive:
        if (a := additions.get(doc["_id"])) is not None:
            doc["added_steps"] = [d["workflow"]["step"] for d in a.docs]


async def add_steps(c: Collections, additions: list[Addition], events: AfterCommit) -> None:
    """Write the added steps, and make the dependents held for them wait for them too."""
    for a in additions:
        await adding.insert_steps(c, a.docs)
        if a.held_ids:
            await _hold(c, a)
        events.info("workflow.steps_added", job_id=str(a.job_id), steps=len(a.docs), held=len(a.held_ids))


async def _hold(c: Collections, a: Addition) -> None:
    # A dependent of over 100 jobs keeps them as edges (domain.edges): it gains edges, not ids.
    await adding.join_counted(c, a.job_id, a.held_ids, a.held_names, a.docs[0]["workflow"]["id"])
    for dep in await adding.waiting_for(c, a.job_id):
        after = parse_after(dep.get("after"), dep["_id"])
        if isinstance(after, str):
            continue  # malformed: the sweep sets it aside
        tag = parse_workflow(dep.get("workflow"))
        deps = None  # a dependent of another workflow, or of none, keeps its tag
        if not isinstance(tag, str) and tag.id == a.docs[0]["workflow"]["id"]:
            deps = list(dict.fromkeys([*tag.deps, *a.held_names]))
        await adding.join(c, dep["_id"], a.job_id, joined_after(dep["after"], a.job_id, a.held_ids), deps)
