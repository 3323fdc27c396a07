"""The pause switches of groups and tenants: read, pause, resume.

Invariant: a pause names only groups or tenants that a job or a worker has used
unless ``force`` says so (a typo would otherwise pause nothing, silently): without
it, :class:`UnusedNames` is raised and nothing is written. The checks are served by
indexes. Every call returns the paused names as they are after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from recruiter.admin.jobs import ensure_indexes_once
from recruiter.admin.status import PausedNames, names_of, paused_names
from recruiter.domain.naming import name_problem
from recruiter.store import SyncCollections, SyncDb, switch_paused, unused_names


class UnusedNames(ValueError):
    """A pause names groups or tenants no job or worker has used (``names``); nothing was paused."""

    def __init__(self, kind: str, names: Sequence[str]) -> None:
        self.kind = kind
        self.names = tuple(names)
        super().__init__(describe_unused(kind, names))


def describe_unused(kind: str, names: Sequence[str]) -> str:
    listed = ", ".join(repr(n) for n in names)
    return f"no job or worker has ever used the {kind}{'s' if len(names) > 1 else ''} {listed}"


@dataclass(frozen=True)
class Switched:
    """The paused names after the switch; the names paused although unused (with ``force``); the
    names a resume found not paused (it wrote nothing for them)."""

    paused: PausedNames
    unused: tuple[str, ...] = ()
    not_paused: tuple[str, ...] = ()


def paused(db: SyncDb) -> PausedNames:
    return paused_names(db)


def unused(db: SyncDb, kind: str, names: Sequence[str]) -> list[str]:
    """The ``names`` (``kind``: group | tenant) no worker and no job, waiting or archived, has used."""
    ensure_indexes_once(db)  # the checks are served by indexes; a fresh database has none yet
    return unused_names(db, kind, list(names))


def pause(db: SyncDb, kind: str, names: Sequence[str], *, force: bool = False) -> Switched:
    """Pause groups or tenants: the recruiter stops assigning their jobs from its next round."""
    _check(kind, names)
    never = unused(db, kind, names)
    if never and not force:
        raise UnusedNames(kind, never)
    now = switch_paused(SyncCollections.of(db).metadata, kind, list(names), True)
    return Switched(names_of(now), tuple(never))


def resume(db: SyncDb, kind: str, names: Sequence[str]) -> Switched:
    """Resume paused groups or tenants; resuming what is not paused writes nothing."""
    _check(kind, names)
    before = paused_names(db)
    after = names_of(switch_paused(SyncCollections.of(db).metadata, kind, list(names), False))
    was = before.groups if kind == "group" else before.tenants
    return Switched(after, not_paused=tuple(sorted(set(names) - set(was))))


def _check(kind: str, names: Sequence[str]) -> None:
    """ValueError, one line, for a name no job could carry (before anything is read or written)."""
    if kind not in ("group", "tenant"):
        raise ValueError(f"{kind!r} is not a switch: group or tenant")
    for name in names:
        problem = name_problem(kind, name)
        if problem:
            raise ValueError(problem)
