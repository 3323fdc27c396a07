"""The worker's side of dynamic workflows: the steps a done attempt added, carried in its outcome.

The job's context gets a :class:`~recruiter.domain.adding.WorkflowSteps` (:func:`steps_for`: its
step name, from the job's ``workflow`` field); each ``ctx.workflow.add`` is checked as it is
called, in the job's code. When the attempt ends done, :func:`with_steps` puts the steps in its
outcome, decided ``steps-not-added`` (:mod:`recruiter.domain.added`): a leader of this release
adds them and archives the job ``done``; one of 0.2.0 archives it saying they were not added. An
attempt that failed, was retried or snoozed, or was halted, carries none. A job run in a child
process sends its steps with its result (:class:`~recruiter.domain.handback.CheckedResult`), as
plain BSON values.

Steps whose field names no update can write (a job that tampered with them: ``add`` refuses
such names) are not carried: the job is archived ``steps-not-added`` saying why.

Invariant: writes nothing, never raises on what the job did.
"""

from __future__ import annotations

from dataclasses import replace

from recruiter.domain.added import NOT_ADDED_REASON, STEPS_NOT_ADDED
from recruiter.domain.adding import WorkflowSteps
from recruiter.domain.field_names import odd_name_problem
from recruiter.domain.handback import CheckedResult
from recruiter.domain.outcome import DONE, Outcome
from recruiter.domain.retry import Archive
from recruiter.domain.workflow import parse_workflow
from recruiter.processes.worker.state import Running
from recruiter.store.layout import Document


def steps_for(job: Document) -> WorkflowSteps:
    """The ``ctx.workflow`` of ``job``: its step name, or None for a job that is no workflow's step."""
    tag = parse_workflow(job.get("workflow")) if job.get("workflow") is not None else "none"
    return WorkflowSteps(None if isinstance(tag, str) else tag.step)


def with_steps(outcome: Outcome, value: object, running: Running) -> Outcome:
    """``outcome``, carrying the steps the attempt added when it ended done (``value``: what the
    attempt returned, a child's :class:`CheckedResult` with its steps)."""
    if isinstance(value, CheckedResult):
        steps = value.steps
    else:
        steps = running.steps.added if running.steps is not None else None
    if not steps or not (isinstance(outcome.decision, Archive) and outcome.decision.why == DONE):
        return outcome
    problem = odd_name_problem(steps, "steps")  # a job that tampered with them: no update could write them
    if problem:
        unwritable = f"the steps it added could not be written: {problem}"
        return replace(outcome, decision=Archive(STEPS_NOT_ADDED, unwritable))
    return replace(outcome, decision=Archive(STEPS_NOT_ADDED, NOT_ADDED_REASON), steps=steps)
