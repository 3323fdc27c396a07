"""Jobs this worker cannot run: why, and what to do, as the refusal stores them; and the check at start.

A job names classes by ``module:Qualname``. The worker may not import a module
outside its allow-list (:class:`~recruiter.domain.naming.AllowedModules`, decided
on the name, nothing imported), and cannot import one its import path does not
hold (started outside the project, an older release). :func:`cannot_run` says
which, for the first class of the job that fails, with the fix the worker can
tell from where it stands: a module its path holds only needs ``--allow-module``;
one it does not hold needs the worker started in the project directory, or
``--import-path``. The executor gives the job back with that refusal
(:mod:`recruiter.domain.refusals`) and the views show it (:mod:`recruiter.domain.refused`).

:func:`warn_unrunnable` runs once at start: one bounded read of the jobs waiting in
the worker's groups, and one warning per module they name that this worker would
refuse, so a worker started in the wrong directory says so at once, not an hour later.

Invariant: nothing here runs a job's code. Whether a module is on the path is asked
of the path finders for its top-level name only (:func:`on_path`), which imports nothing.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from structlog.typing import FilteringBoundLogger

from recruiter.domain.naming import AllowedModules, UnknownClass, class_names, import_qualified, split_qualified
from recruiter.domain.records import Raw
from recruiter.domain.refusals import CANNOT_IMPORT, MAX_REASON_CHARS, NOT_ALLOWED, fix_for
from recruiter.store.layout import AsyncColl
from recruiter.store.waiting import read_waiting_classes

# The start check reads at most this many waiting jobs, and warns of at most this many modules.
CHECKED_JOBS = 1000
WARNED_MODULES = 10


@dataclass(frozen=True)
class CannotRun:
    """Why this worker cannot run a job: ``kind`` (not-allowed, cannot-import), the class, the reason, the fix."""

    kind: str
    name: str
    reason: str
    fix: str


def job_classes(job: Raw) -> list[object]:
    """Every class name the attempt could import: the workable's, then the retry policy's (nested too)."""
    workable = job.get("workable")
    return [workable.get("class") if isinstance(workable, dict) else None, *class_names(job.get("retry_policy"))]


def _module(name: object) -> str | None:
    try:
        return split_qualified(name)[0]
    except UnknownClass:
        return None


def on_path(module: str) -> bool:
    """Whether this process can find ``module``'s top-level package: imported already, or found
    by the path finders on ``sys.path`` (built in or installed too). Imports nothing."""
    top = module.split(".")[0]
    if top in sys.modules or top in sys.builtin_module_names:
        return True
    try:
        return importlib.machinery.PathFinder.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def _fix(kind: str, module: str | None) -> str:
    return fix_for(kind, module, importable=module is not None and on_path(module), cwd=os.getcwd())


def cannot_run(job: Raw, allowed: AllowedModules | None) -> CannotRun | None:
    """Why this worker cannot run ``job`` (see the module doc); None if it can. The allow-list
    is checked on the names first (never importing a refused one), then the classes are imported."""
    names = job_classes(job)
    for name in names if allowed is not None else ():
        why = allowed.refusal(name) if allowed is not None else None
        if why:
            return CannotRun(NOT_ALLOWED, str(name)[:200], why, _fix(NOT_ALLOWED, _module(name)))
    for name in names:
        try:
            import_qualified(name)
        except UnknownClass as exc:
            reason = f"cannot import {name}: {exc}"[:MAX_REASON_CHARS]
            return CannotRun(CANNOT_IMPORT, str(name)[:200], reason, _fix(CANNOT_IMPORT, _module(name)))
        except Exception:  # noqa: BLE001 - the module's own code failed: the attempt, run, judges it
            return None
    return None


def refused_modules(docs: Iterable[Raw], allowed: AllowedModules | None) -> dict[str, set[str]]:
    """The modules the jobs ``docs`` name that this worker would refuse (outside ``allowed``, or
    not on its path), each with the groups of the jobs naming it. Imports nothing."""
    found: dict[str, set[str]] = {}
    for doc in docs:
        group = doc.get("group")
        for name in job_classes(doc):
            module = _module(name)
            if module is None or (allowed is not None and not allowed.allows(module)) or not on_path(module):
                found.setdefault(module or str(name)[:100], set()).add(str(group)[:100])
    return found


async def warn_unrunnable(scheduled: AsyncColl, groups: Sequence[str], allowed: AllowedModules | None,
                          log: FilteringBoundLogger) -> int:
    """At start: one warning per module (at most :data:`WARNED_MODULES`) that jobs waiting in
    ``groups`` name and this worker would refuse; returns how many modules it found."""
    docs = await read_waiting_classes(scheduled, groups, CHECKED_JOBS)
    found = refused_modules(docs, allowed)
    for module in sorted(found)[:WARNED_MODULES]:
        allowed_here = allowed is None or allowed.allows(module)
        kind = CANNOT_IMPORT if allowed_here else NOT_ALLOWED
        why = ("not on this worker's import path" if allowed_here
               else "not among this worker's allowed modules" + ("" if on_path(module) else
                                                                   " (nor on its import path)"))
        log.warning("worker.refuses_waiting_jobs", module=module, groups=sorted(found[module])[:10],
                    reason=f"jobs waiting in its groups name {module}, {why}",
                    detail="this worker gives them back unrun; if no worker runs them they are archived "
                           "unrunnable after --give-back-for", fix=_fix(kind, module))
    if len(found) > WARNED_MODULES:
        log.warning("worker.refuses_waiting_jobs", more_modules=len(found) - WARNED_MODULES,
                    detail=f"only the first {WARNED_MODULES} modules are named")
    return len(found)
