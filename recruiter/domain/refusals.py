"""Jobs a worker cannot run: given back for another worker, archived only after a limit.

In a rolling deploy, workers of two releases run side by side: an old worker meets
a class that only the new release has, or a worker's ``--allow-module`` list
leaves a job's module out. Neither is the job's failure, nor proof that no worker
can run it. So a worker that cannot import a job's classes (the workable's and
those of its retry policy), or may not, gives the job back **unattempted**: its
attempt is not counted, no execution is recorded, no retry policy is asked. The
outcome carries a *refusal* (the refusing process and worker, when, the reason,
its kind: :data:`NOT_ALLOWED` or :data:`CANNOT_IMPORT`, the class refused and
what to do about it, each cut to a bound), which the recruiter appends to the
job's ``refusals`` (the newest :data:`MAX_KEPT`). Every view of a job reads them
back through :mod:`recruiter.domain.refused`.

The recruiter's selection (:mod:`recruiter.domain.selection`) then never gives
the job to a process that refused it; any other worker of its group may take it,
including a new process of the same ``--id`` (a restarted worker of a new release
registers under a new process token). Each refusal puts the job back a little
later (1 s, doubling per refusal, at most :data:`MAX_BACKOFF`), so a job that no
live worker can run costs the round almost nothing while it waits.

The limit: a job refused for ``give_back_for`` (``worker start --give-back-for``,
default one hour) since its first refusal is no longer kept from anyone
(``refusals_until``), and the next worker that cannot run it archives it with
``why: "unrunnable"`` and the reason. The limit is the refusing worker's judgement,
like every decision about an attempt (the recruiter only applies outcomes).

Invariant: pure; a refusal never counts an attempt, and a job is never assigned
to a process it names in ``refusals`` before ``refusals_until``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from recruiter.domain.retry import Archive, Decision, RetryAt

UNRUNNABLE = "unrunnable"
# Why a worker gave a job back: a class the job names is outside its allowed modules
# (``--allow-module``; never imported), or importing it failed (not on its path, not in this release).
NOT_ALLOWED = "not-allowed"
CANNOT_IMPORT = "cannot-import"
KINDS = (NOT_ALLOWED, CANNOT_IMPORT)
MAX_KEPT = 20
# The bounds of what a refusal stores (characters): the reason, the class named, what to do.
MAX_REASON_CHARS = 500
MAX_CLASS_CHARS = 200
MAX_FIX_CHARS = 400
FIRST_BACKOFF = timedelta(seconds=1)
MAX_BACKOFF = timedelta(seconds=60)
DEFAULT_GIVE_BACK_FOR = timedelta(hours=1)


def refusal_document(process: str, worker_id: str, reason: str, now: datetime, *, kind: str | None = None,
                     name: str | None = None, fix: str | None = None) -> dict[str, object]:
    """One entry of a job's ``refusals``: who, when and why (``kind``, the class ``name``
    refused, and the ``fix``: what the operator can do), each cut to its bound."""
    doc: dict[str, object] = {"process": process, "worker": worker_id, "reason": reason[:MAX_REASON_CHARS],
                              "at": now}
    if kind in KINDS:
        doc["kind"] = kind
    if name:
        doc["class"] = name[:MAX_CLASS_CHARS]
    if fix:
        doc["fix"] = fix[:MAX_FIX_CHARS]
    return doc


def fix_for(kind: str | None, module: str | None, *, importable: bool = False, cwd: str | None = None) -> str:
    """What the operator can do about a refusal of ``kind`` naming ``module``: ``importable``
    says whether the worker's import path holds the module (so allowing it is enough), ``cwd``
    where the worker runs (a worker started outside the project finds none of its modules)."""
    here = f" (it runs in {cwd})" if cwd else ""
    top = module.split(".")[0] if module else "the job's module"
    if kind == NOT_ALLOWED and module and importable:
        return f"allow the module on the worker: --allow-module {top} (RECRUITER_ALLOW_MODULE)"
    if kind == NOT_ALLOWED and not module:
        return "the job names no valid class: fix the job, or cancel it"
    return (f"start the worker in the project directory{here}, or give --import-path with the directory "
            f"holding {top}" + (", or --allow-module if it is installed" if kind == NOT_ALLOWED else
                                ", or deploy the release that has it"))


def _refusals(job: Mapping[str, object]) -> list[Mapping[str, object]]:
    stored = job.get("refusals")
    return [r for r in stored if isinstance(r, Mapping)] if isinstance(stored, list) else []


def first_refused_at(job: Mapping[str, object], now: datetime) -> datetime:
    """When the job was first refused (``now`` if never, or if what is stored is not a date)."""
    first = job.get("first_refused_at")
    return first if isinstance(first, datetime) and first <= now else now


def refused_by(job: Mapping[str, object], now: datetime | None = None) -> frozenset[str]:
    """The processes the job may not be given to at ``now``: none once ``refusals_until`` has
    passed (then anyone may take it, and the next refusal archives it ``unrunnable``)."""
    until = job.get("refusals_until")
    if now is not None and isinstance(until, datetime) and now >= until:
        return frozenset()
    return frozenset(p for r in _refusals(job) if isinstance(p := r.get("process"), str))


def decide_refusal(job: Mapping[str, object], reason: str, now: datetime,
                   give_back_for: timedelta = DEFAULT_GIVE_BACK_FOR) -> tuple[Decision, datetime]:
    """What a worker that cannot run ``job`` decides: put it back (due a little later) for
    another worker, or archive it ``unrunnable`` once refused for ``give_back_for``;
    with the ``refusals_until`` to store."""
    first = first_refused_at(job, now)
    until = first + give_back_for
    if now >= until:
        return Archive(UNRUNNABLE, f"no worker could run it for {give_back_for}: {reason}"), until
    backoff = min(FIRST_BACKOFF * 2 ** min(len(_refusals(job)), 16), MAX_BACKOFF)
    return RetryAt(min(now + backoff, until)), until
