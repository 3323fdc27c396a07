"""Dynamic workflows, the job's side: a running step adds steps to its own workflow (pure, no I/O).

A step of a workflow reaches its workflow through its context::

    def execute(self, ctx):
        parts = ctx.workflow.fan_out("part", [Part(n) for n in range(3)], hold_dependents=True)
        ctx.workflow.add("total", Total(), deps=parts, hold_dependents=True)

Nothing is written while the job runs: :class:`WorkflowSteps` keeps what was added, each step
checked as it is added (a bad one raises :class:`StepsRefused` in the job's own code, so the
attempt fails as for any bug of the job's, and is judged by its retry policy). When the attempt
ends done, its worker carries the steps in the outcome it writes (``steps``), and the leader's
round adds them in the transaction that archives the job (:mod:`recruiter.domain.added`): they
are added once, and only by an attempt that ended done (one that failed, was retried or
snoozed adds nothing).

What is checked here, where the job can be told: the job is a step of a workflow; each name is a
step name, not the adding step's nor one added before; each dep is a step name; the policy is
one ``.after`` accepts; the job is a valid job without a unique key; at most
:data:`MAX_ADDED_STEPS` steps and :data:`MAX_ADDED_BYTES` bytes in one attempt. What only the
leader can know (a name some step of the workflow already has, a dep naming no step, the
workflow's size) is checked by its round: see :mod:`recruiter.domain.added`.

A dep may name a step added before in the same attempt, or any step of the workflow; a dep on
the adding step itself is dropped (the added steps exist only once it is done). With
``hold_dependents=True``, the adding step's own dependents (the steps still waiting for it)
also wait for the added step, with the policy they have for the adding step: a "join".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

import bson
from bson.codec_options import CodecOptions

from recruiter.domain.dependencies import DependencyRefused, checked_if_failed
from recruiter.domain.dependency_policy import PolicyRefused, checked_policy
from recruiter.domain.handback import MiB
from recruiter.domain.job import JobOptions, JobRefused, build_job_document, unique_of
from recruiter.domain.workflow import WorkflowRefused, check_name

if TYPE_CHECKING:
    from recruiter.domain.builder import JobBuilder
    from recruiter.domain.workable import Workable

# At most this many steps added by one attempt, and this many BSON bytes of them: they ride in
# the outcome the worker writes to its roster entry, beside a result (recruiter.domain.handback).
MAX_ADDED_STEPS = 1_000
MAX_ADDED_BYTES = 1 * MiB


class StepsRefused(WorkflowRefused):
    """A step that cannot be added: one line; raised in the job's code, nothing is added."""


class WorkflowSteps:
    """``ctx.workflow``: the steps a running step adds to its workflow (see the module).
    ``step`` is the running job's step name, None for a job that is no workflow's step."""

    def __init__(self, step: str | None = None) -> None:
        self.step = step
        self._added: list[dict[str, Any]] = []
        self._bytes = 0

    def add(self, name: str, job: Workable | JobBuilder[Any], *, deps: Sequence[str] = (),
            if_failed: str = "cancel", on: Mapping[str, str] | None = None,
            hold_dependents: bool = False) -> str:
        """Add step ``name`` running ``job`` (a Workable or a job builder) once the steps named in
        ``deps`` have ended (``if_failed``, ``on``: as for ``Workflow.step``); with
        ``hold_dependents``, the steps waiting for this one also wait for it. Returns ``name``.
        Raises :class:`StepsRefused` (one line) and adds nothing when the step cannot be added."""
        if self.step is None:
            raise StepsRefused("this job is not a step of a workflow: only a workflow's step can add steps to it")
        name = _checked_name(name)
        if name == self.step or any(s["name"] == name for s in self._added):
            raise StepsRefused(f"step {name!r} is added twice (or is the adding step); nothing was added")
        if len(self._added) >= MAX_ADDED_STEPS:
            raise StepsRefused(f"one attempt adds at most {MAX_ADDED_STEPS} steps; {name!r} was not added")
        step = {"name": name, "deps": _checked_deps(name, deps, self.step), "hold": hold_dependents is True,
                **_checked_policy(name, if_failed, on), "job": _job_document(name, job)}
        size = len(bson.encode(step))
        if self._bytes + size > MAX_ADDED_BYTES:
            raise StepsRefused(f"the steps one attempt adds take at most {MAX_ADDED_BYTES} bytes; {name!r} "
                               f"({size} bytes) would pass that after {self._bytes}; it was not added")
        self._added.append(step)
        self._bytes += size
        return name

    def fan_out(self, prefix: str, jobs: Iterable[Workable | JobBuilder[Any]], *, deps: Sequence[str] = (),
                if_failed: str = "cancel", on: Mapping[str, str] | None = None,
                hold_dependents: bool = False) -> list[str]:
        """Steps ``prefix-1``, ``prefix-2``... each once ``deps`` have ended; their names."""
        return [self.add(f"{prefix}-{k}", job, deps=deps, if_failed=if_failed, on=on, hold_dependents=hold_dependents)
                for k, job in enumerate(jobs, 1)]

    @property
    def added(self) -> list[dict[str, Any]]:
        """The steps added so far, as the outcome carries them (plain BSON values)."""
        return list(self._added)


def _checked_name(name: object) -> str:
    try:
        return check_name("a step's name", name)
    except WorkflowRefused as exc:
        raise StepsRefused(f"{exc}; nothing was added") from None


def _checked_deps(name: str, deps: Sequence[str], own: str) -> list[str]:
    if isinstance(deps, str) or not isinstance(deps, Sequence | set | frozenset):
        raise StepsRefused(f"step {name!r}: deps must be a list of step names, got {deps!r:.60}")
    out = []
    for dep in deps:
        if dep == own:
            continue  # the added steps exist only once the adding step is done
        try:
            out.append(check_name(f"step {name!r}: a dep", dep))
        except WorkflowRefused as exc:
            raise StepsRefused(f"{exc}; nothing was added") from None
    return list(dict.fromkeys(out))


def _checked_policy(name: str, if_failed: str, on: Mapping[str, str] | None) -> dict[str, object]:
    try:
        checked_policy(checked_if_failed(if_failed), on)
    except (DependencyRefused, PolicyRefused) as exc:
        raise StepsRefused(f"step {name!r}: {exc}") from None
    return {"if_failed": if_failed, **({"on": dict(on)} if on else {})}


def _job_document(name: str, job: object) -> dict[str, Any]:
    """The step's job, built as an enqueue builds it (its ``after`` and ``_id`` are the round's)."""
    from recruiter.domain.builder import JobBuilder
    from recruiter.domain.workable import Workable

    if isinstance(job, JobBuilder):
        workable, options = job.workable, job.options
    elif isinstance(job, Workable):
        workable, options = job, JobOptions()
    else:
        raise StepsRefused(f"step {name!r}: expected a Workable or a job builder, got {type(job).__name__}")
    if options.after:
        raise StepsRefused(f"step {name!r}: an added step waits for steps by name (deps=), not with .after()")
    try:
        if unique_of(workable, options) is not None:
            raise JobRefused("a workflow's step cannot have a unique key (its conflict would leave the step out)")
        doc = dict(build_job_document(workable, options, datetime.now(UTC)))
    except JobRefused as exc:
        raise StepsRefused(f"step {name!r}: {exc}; it was not added") from None
    doc.pop("_id", None)
    return doc


def plain_steps(steps: object) -> list[dict[str, Any]] | None:
    """The steps added (``ctx.workflow``), as plain BSON values, or None: read in a child process,
    so the worker never unpickles an object of the job's. :class:`StepsRefused` if they cannot be."""
    try:
        added = steps.added if isinstance(steps, WorkflowSteps) else None
        if not added:
            return None
        return cast("list[dict[str, Any]]", bson.decode(bson.encode({"steps": added}), _AWARE)["steps"])
    except Exception as exc:  # noqa: BLE001 - what the job may have done to them
        raise StepsRefused(f"the steps it added could not be read ({type(exc).__name__})") from None


_AWARE: CodecOptions[dict[str, Any]] = CodecOptions(tz_aware=True, tzinfo=UTC)
