"""Workflows and batches from application code: named steps enqueued as one unit.

::

    wf = Workflow("monthly-report")
    wf.step("fetch", Fetch("2026-11"))
    parts = wf.fan_out("part", [Part(n) for n in range(5)], deps=["fetch"])
    wf.step("total", Total(), deps=parts)
    run = wf.enqueue(rec)                  # await wf.enqueue(arec) with an AsyncRecruiter
    run["total"].wait(timeout=60)

    batch = Batch("import-users", [ImportUser(u) for u in users])
    batch.on_complete(Report()).on_success(Notify())
    run = batch.enqueue(rec)
    run.progress()                         # {"done": 3, "failed": 0, "pending": 7, "total": 10}

The shape is checked first (:func:`recruiter.domain.workflow.check_shape`: unique names,
known deps, no cycle, at most 10 000 steps), then every step is built and checked as a job,
then all are written in one transaction (:func:`recruiter.producer.after.insert_batch`):
all or nothing. Every refusal is one line (:class:`~recruiter.domain.workflow.WorkflowRefused`,
a :class:`~recruiter.domain.job.JobRefused`) and nothing is written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar, overload

from bson import ObjectId

from recruiter.admin.workflow_view import read_workflow
from recruiter.domain.builder import JobBuilder, as_builder
from recruiter.domain.dependencies import DependencyRefused, checked_if_failed
from recruiter.domain.dependency_policy import PolicyRefused, checked_policy
from recruiter.domain.job import JobRefused
from recruiter.domain.workable import Workable
from recruiter.domain.workflow import StepSpec, WorkflowRefused, check_name, check_shape, workflow_field
from recruiter.producer.after import insert_batch, insert_batch_async
from recruiter.producer.building import all_or_nothing, built_of, enqueued_view
from recruiter.producer.client import AsyncRecruiter, Recruiter
from recruiter.producer.handles import AsyncJobHandle, JobHandle
from recruiter.store.batches import BatchRefused
from recruiter.store.connection import session_problem
from recruiter.store.layout import Document

Item = JobBuilder[Any] | Workable
H = TypeVar("H", JobHandle, AsyncJobHandle)


@dataclass(frozen=True)
class WorkflowRun(Generic[H]):
    """A workflow as written: its id, and its steps' handles by name (``run["total"]``)."""

    id: ObjectId
    name: str
    handles: dict[str, H]
    recruiter: Recruiter | AsyncRecruiter

    def __getitem__(self, step: str) -> H:
        return self.handles[step]

    def progress(self, jobs_only: bool = True) -> dict[str, int]:
        """``{done, failed, pending, total}`` of its steps, read now (a batch's callbacks left out
        unless ``jobs_only=False``). With an :class:`AsyncRecruiter`: :meth:`progress_async`."""
        if not isinstance(self.recruiter, Recruiter):
            raise TypeError("progress() reads with a Recruiter; with an AsyncRecruiter: await run.progress_async()")
        return _counts(self.recruiter.db, self.id, jobs_only)

    async def progress_async(self, jobs_only: bool = True) -> dict[str, int]:
        """:meth:`progress` for an :class:`AsyncRecruiter` (read through its admin's client, in a thread)."""
        if not isinstance(self.recruiter, AsyncRecruiter):
            raise TypeError("progress_async() is for an AsyncRecruiter; with a Recruiter: run.progress()")
        return await asyncio.to_thread(_counts, self.recruiter.admin.sync.db, self.id, jobs_only)


def _counts(db: Any, workflow_id: ObjectId, jobs_only: bool) -> dict[str, int]:
    view = read_workflow(db, workflow_id)
    return view.counts(jobs_only) if view is not None else {"done": 0, "failed": 0, "pending": 0, "total": 0}


class Workflow:
    """Named steps, each a job waiting for the steps it names in ``deps``; :meth:`enqueue` writes all or nothing."""

    kind = "workflow"

    def __init__(self, name: str) -> None:
        self.name = check_name("a workflow's name", name)
        self._steps: list[tuple[StepSpec, Item]] = []

    def step(self, name: str, job: Item, *, deps: Sequence[str] = (), if_failed: str = "cancel",
             on: Mapping[str, str] | None = None) -> str:
        """Add step ``name`` running ``job`` (a Workable or a job builder), once every step in
        ``deps`` has ended (``if_failed`` and ``on``: see :meth:`recruiter.JobBuilder.after`).
        Returns ``name``."""
        try:
            policy = checked_if_failed(if_failed)
            checked_policy(policy, on)
        except (DependencyRefused, PolicyRefused) as exc:
            raise WorkflowRefused(f"step {name!r}: {exc}") from None
        fates = tuple(sorted(on.items())) if on else None
        return self._add(StepSpec(check_name("a step's name", name), _names(deps), policy, on=fates), job)

    def _add(self, spec: StepSpec, job: Item) -> str:
        self._steps.append((spec, job))
        return spec.name

    def chain(self, steps: Iterable[tuple[str, Item]], *, deps: Sequence[str] = (),
              if_failed: str = "cancel", on: Mapping[str, str] | None = None) -> list[str]:
        """Steps each waiting for the one before it (the first for ``deps``); their names."""
        names: list[str] = []
        for name, job in steps:
            names.append(self.step(name, job, deps=[names[-1]] if names else deps, if_failed=if_failed, on=on))
        return names

    def fan_out(self, prefix: str, jobs: Iterable[Item], *, deps: Sequence[str] = (),
                if_failed: str = "cancel", on: Mapping[str, str] | None = None) -> list[str]:
        """Steps ``prefix-1``, ``prefix-2``... run in parallel, each once ``deps`` have ended; their names
        (a fan-in is then one step with ``deps=`` those names)."""
        return [self.step(f"{prefix}-{k}", job, deps=deps, if_failed=if_failed, on=on)
                for k, job in enumerate(jobs, 1)]

    def sub(self, name: str, workflow: Workflow, *, deps: Sequence[str] = (), if_failed: str = "cancel",
            on: Mapping[str, str] | None = None) -> list[str]:
        """Add the steps of ``workflow`` (another :class:`Workflow` or a :class:`Batch`, itself
        possibly holding subs) as steps of this one, named ``name:step``: its first steps (those
        waiting for no step of it) wait for ``deps`` with ``if_failed`` and ``on``, the others for
        what they waited for in it, with their own policies. Returns the names of its last steps
        (those no step of it waits for): a step with ``deps=`` them runs once the sub-workflow has
        ended. It is written with this workflow, all or nothing, and operated as part of it (one
        workflow id: ``recruiter workflows show`` lists its steps under their prefix)."""
        check_name("a sub-workflow's name", name)
        if not isinstance(workflow, Workflow):
            raise WorkflowRefused(f"sub-workflow {name!r}: {workflow!r:.60} is not a Workflow or a Batch")
        specs = workflow._specs()
        check_shape([spec for spec, _ in specs])
        waited = {d for spec, _ in specs for d in spec.deps}
        for spec, job in specs:
            step = f"{name}:{spec.name}"
            if spec.deps:
                self._add(replace(spec, name=check_name("a step's name", step),
                                  deps=tuple(f"{name}:{d}" for d in spec.deps)), job)
            else:
                self.step(step, job, deps=deps, if_failed=if_failed, on=on)
        return [f"{name}:{spec.name}" for spec, _ in specs if spec.name not in waited]

    def _specs(self) -> list[tuple[StepSpec, Item]]:
        return list(self._steps)

    @property
    def steps(self) -> list[StepSpec]:
        """The steps as declared (a batch's callbacks included)."""
        return [spec for spec, _ in self._specs()]

    def documents(self, producer: Recruiter | AsyncRecruiter, max_bytes: int) -> list[Document]:
        """Every step's document (the shape checked first; :class:`WorkflowRefused` naming the step)."""
        specs = self._specs()
        check_shape([spec for spec, _ in specs])
        workflow_id = ObjectId()
        builders: list[JobBuilder[Any]] = []
        for spec, job in specs:
            try:
                builders.append(as_builder(job, producer))
            except JobRefused as exc:
                raise WorkflowRefused(f"step {spec.name!r}: {exc}; nothing was written") from None
        ids = {spec.name: b.options.job_id or ObjectId() for (spec, _), b in zip(specs, builders, strict=True)}
        now = producer.clock.now()
        docs = []
        for (spec, _), b in zip(specs, builders, strict=True):
            try:
                doc = _built(b, spec, ids, now, max_bytes)
            except JobRefused as exc:
                raise WorkflowRefused(f"step {spec.name!r}: {exc}; nothing was written") from None
            doc["workflow"] = workflow_field(workflow_id, self.name, spec, self.kind)
            docs.append(doc)
        return docs

    @overload
    def enqueue(self, recruiter: Recruiter, *, session: Any = None) -> WorkflowRun[JobHandle]: ...

    @overload
    def enqueue(self, recruiter: AsyncRecruiter, *,
                session: Any = None) -> Coroutine[Any, Any, WorkflowRun[AsyncJobHandle]]: ...

    def enqueue(self, recruiter: Recruiter | AsyncRecruiter, *, session: Any = None) -> Any:
        """Write every step in one transaction (or in ``session``'s); returns a :class:`WorkflowRun`
        (awaitable with an :class:`AsyncRecruiter`)."""
        if session is not None and (problem := session_problem(recruiter.client, session)):
            raise JobRefused(f"{problem}; nothing was written")
        if isinstance(recruiter, AsyncRecruiter):
            return self._enqueue_async(recruiter, session)
        docs = self.documents(recruiter, recruiter.max_document_bytes())
        all_or_nothing(lambda: insert_batch(recruiter.collections, docs, session))
        now = recruiter.clock.now()
        return self._run(recruiter, docs, {d["workflow"]["step"]: JobHandle(d["_id"], enqueued_view(d, now), recruiter)
                                           for d in docs})

    async def _enqueue_async(self, recruiter: AsyncRecruiter, session: Any) -> WorkflowRun[AsyncJobHandle]:
        docs = self.documents(recruiter, await recruiter.max_document_bytes())
        try:
            await insert_batch_async(recruiter.collections, docs, session)
        except BatchRefused as exc:
            raise JobRefused(str(exc)) from None
        now = recruiter.clock.now()
        return self._run(recruiter, docs, {d["workflow"]["step"]: AsyncJobHandle(d["_id"], enqueued_view(d, now),
                                                                                  recruiter) for d in docs})

    def _run(self, recruiter: Recruiter | AsyncRecruiter, docs: list[Document],
             handles: dict[str, H]) -> WorkflowRun[H]:
        return WorkflowRun(docs[0]["workflow"]["id"], self.name, handles, recruiter)


def _names(deps: Sequence[str]) -> tuple[str, ...]:
    if isinstance(deps, str):
        raise WorkflowRefused(f"deps must be a list of step names, got the string {deps!r:.60}")
    return tuple(dict.fromkeys(deps))


def _built(builder: JobBuilder[Any], spec: StepSpec, ids: dict[str, ObjectId], now: Any, max_bytes: int) -> Document:
    if builder.unique_spec() is not None:
        raise JobRefused("a workflow's step cannot have a unique key (its conflict would leave the step out)")
    builder = replace(builder, options=replace(builder.options, job_id=ids[spec.name]))
    if spec.deps:
        own = builder.options.after
        builder = builder.after(*own, *(ids[d] for d in spec.deps if ids[d] not in own), if_failed=spec.if_failed,
                                on=dict(spec.on) if spec.on else None)
    doc, _ = built_of(builder, now, max_bytes)
    return doc


class Batch(Workflow):
    """Jobs run in parallel, with callbacks (Sidekiq's batches): ``on_complete`` runs once every job
    has ended, whatever happened; ``on_success`` only if every job ended done (else it is archived
    ``upstream-failed``, naming the job that did not). Progress: :meth:`WorkflowRun.progress`."""

    kind = "batch"

    def __init__(self, name: str, jobs: Iterable[Item] = ()) -> None:
        super().__init__(name)
        self._callbacks: dict[str, Item] = {}
        for job in jobs:
            self.add(job)

    def add(self, job: Item, name: str | None = None) -> str:
        """Add a job (named ``job-N`` unless ``name`` is given); returns its step name."""
        return self.step(name or f"job-{len(self._steps) + 1}", job)

    def on_success(self, job: Item) -> Batch:
        self._callbacks["on_success"] = job
        return self

    def on_complete(self, job: Item) -> Batch:
        self._callbacks["on_complete"] = job
        return self

    def _specs(self) -> list[tuple[StepSpec, Item]]:
        jobs = list(self._steps)
        if not jobs:
            raise WorkflowRefused("a batch needs at least one job; nothing was written")
        names = tuple(spec.name for spec, _ in jobs)
        return jobs + [(StepSpec(cb, names, "cancel" if cb == "on_success" else "run", cb), job)
                       for cb, job in self._callbacks.items()]
