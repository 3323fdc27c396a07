"""The results of the jobs a running job waited for, as it reads them: ``ctx.dependency_results()`` (pure).

The worker reads them from ``archived`` once, as the attempt starts (one read, only for a job
that waited for others; :func:`recruiter.store.dependencies.with_dependency_results`), and
hands them in its :class:`~recruiter.domain.workable.JobContext`: plain data, so a job run in
a child process gets them too. Keys: each upstream's id (24 hex digits), and its step name
where its document carries ``workflow.step`` (a named workflow's)::

    results = ctx.dependency_results()
    results["fetch"].result          # by step name, or results[str(job_id)]
    results.value("fetch")           # the result, or ResultUnavailable saying why there is none

A result is what the upstream's ``archived`` copy holds, within the result size rule: one
dropped (over the size limit) reads as ``dropped`` with its reason, never as None; an
upstream that ended other than done has no result (``why`` says how it ended; ``gone``: its
archived copy was pruned or deleted). Every document read is untrusted: a malformed field
reads as what is known (a ``why`` of ``?``), never crashes the job.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The key under which the worker keeps them beside the job document it runs (never stored).
KEY = "__dependency_results"
PROJECTION = {"why": 1, "result": 1, "result_dropped": 1, "workflow.step": 1}


class ResultUnavailable(LookupError):
    """An upstream's result that cannot be read: it ended other than done, or it was dropped."""


@dataclass(frozen=True)
class DependencyResult:
    """One upstream, as its ``archived`` copy says it ended."""

    job_id: str
    why: str  # "done", or how it ended otherwise ("gone": neither queued nor archived)
    result: object = None
    dropped: str | None = None  # why its result was not kept (it ended done); None otherwise
    step: str | None = None  # its ``workflow.step``, if it is a step of a named workflow

    @property
    def ok(self) -> bool:
        """Whether it ended done with its result kept."""
        return self.why == "done" and self.dropped is None

    def value(self) -> object:
        """Its result, or :class:`ResultUnavailable` saying why there is none."""
        if self.why != "done":
            raise ResultUnavailable(f"job {self.job_id}{self._named()} ended {self.why}: it has no result")
        if self.dropped is not None:
            raise ResultUnavailable(f"job {self.job_id}{self._named()} ended done, but its result was dropped: "
                                    f"{self.dropped}")
        return self.result

    def _named(self) -> str:
        return f" (step {self.step})" if self.step else ""


class DependencyResults(Mapping[str, DependencyResult]):
    """The upstreams of a job, by id (24 hex digits) and by step name; iterates over the ids."""

    def __init__(self, items: Sequence[DependencyResult] = ()) -> None:
        self._by_id = {r.job_id: r for r in items}
        self._by_step = {r.step: r for r in items if r.step}

    def __getitem__(self, key: str) -> DependencyResult:
        found = self._by_id.get(key) or self._by_step.get(key)
        if found is None:
            raise KeyError(f"{key!r:.60} is neither the id nor the step name of a job this one waited for")
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_id)

    def __len__(self) -> int:
        return len(self._by_id)

    def value(self, key: str) -> object:
        """The result of the upstream ``key`` (id or step name); :class:`ResultUnavailable` if none."""
        return self[key].value()

    def steps(self) -> dict[str, DependencyResult]:
        """The upstreams that are named steps, by step name."""
        return dict(self._by_step)

    def __repr__(self) -> str:
        return f"DependencyResults({list(self._by_id.values())!r})"


def results_of(ids: Sequence[object], archived: Mapping[object, Mapping[str, Any]]) -> DependencyResults:
    """The results of the upstreams ``ids`` from their ``archived`` copies (id -> document, as read)."""
    return DependencyResults([_one(i, archived.get(i)) for i in ids])


def _one(job_id: object, doc: Mapping[str, Any] | None) -> DependencyResult:
    if doc is None:
        return DependencyResult(str(job_id), "gone")
    why = doc.get("why")
    workflow = doc.get("workflow")
    step = workflow.get("step") if isinstance(workflow, Mapping) else None
    dropped = doc.get("result_dropped")
    reason = (dropped.get("reason") if isinstance(dropped, Mapping) else dropped) if dropped is not None else None
    return DependencyResult(str(job_id), why if isinstance(why, str) else "?",
                            doc.get("result") if why == "done" else None,
                            None if reason is None else str(reason)[:200] or "no reason recorded",
                            step if isinstance(step, str) and step else None)
