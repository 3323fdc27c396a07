"""The releases live (``recruiter status``, the dashboard): who runs which, and what to warn of.

A live process records its release (:mod:`recruiter.domain.versions`): a worker slot in
its roster entry, a leader in the lease it holds. This module is pure: it takes what
:mod:`recruiter.admin.status` and :mod:`recruiter.admin.stats` read.

Invariant: a warning names the versions and what to do, in one line each: releases are
mixed (an upgrade under way, or one left half done); a live process and this release do
not work side by side (:func:`recruiter.domain.versions.refusal`, as the leader and the
workers judge it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from recruiter.domain import versions
from recruiter.domain.lanes import slot_of
from recruiter.domain.versions import Release

if TYPE_CHECKING:  # status and stats import this module
    from recruiter.admin.status import LeaseView
    from recruiter.admin.workers import WorkerView

# Worker ids named in a warning, at most (then "and N more").
SHOWN_IDS = 3


@dataclass(frozen=True)
class ReleasesView:
    """``live``: each release running, newest first, and who runs it (``recruiter lease``,
    ``2 worker slots``); ``warnings``: one line each (none when all run one release this one works beside)."""

    live: Mapping[str, tuple[str, ...]]
    warnings: tuple[str, ...]


def releases_of(workers: Sequence[tuple[str, Release]], leaders: Sequence[tuple[str, Release]]) -> ReleasesView:
    """The view of the live worker slots ``(id, release)`` and held leases ``(name, release)``."""
    by_release: dict[Release, tuple[list[str], list[str]]] = {}
    for name, release in sorted(leaders, key=lambda lease: lease[0]):
        by_release.setdefault(release, ([], []))[0].append(f"{name} lease")
    for worker_id, release in workers:
        by_release.setdefault(release, ([], []))[1].append(worker_id)
    order = versions.newest_first(list(by_release))
    live = {r.shown: (*by_release[r][0], *_slots(by_release[r][1])) for r in order}
    warnings = []
    if len(order) > 1:
        warnings.append(f"releases are mixed: {', '.join(live)}; finish the upgrade (or the rollback) "
                        f"one release at a time ({versions.DEPLOYS})")
    for r in order:
        leases, ids = by_release[r]
        for name in leases:
            if (line := versions.refusal(r, f"{name} holder")) is not None:
                warnings.append(line)
        if ids and (line := versions.refusal(r, "worker")) is not None:
            warnings.append(f"{_named(ids)}: {line}")
    return ReleasesView(live=live, warnings=tuple(warnings))


def live_releases(roster: Sequence[WorkerView], leases: Sequence[LeaseView]) -> ReleasesView:
    """:func:`releases_of` the live worker slots of ``roster`` (a slot's look-ahead lanes count once) and
    the held ``leases`` (the dashboard's overview, :mod:`recruiter.admin.stats`)."""
    return releases_of([(w.id, w.release) for w in roster if w.live and slot_of(w.id) == w.id],
                       [(str(lease.name), lease.release) for lease in leases if lease.held])


def _slots(ids: list[str]) -> tuple[str, ...]:
    return (f"{len(ids)} worker slot{'' if len(ids) == 1 else 's'}",) if ids else ()


def _named(ids: list[str]) -> str:
    shown = ", ".join(sorted(ids)[:SHOWN_IDS])
    more = f" and {len(ids) - SHOWN_IDS} more" if len(ids) > SHOWN_IDS else ""
    return f"worker{'' if len(ids) == 1 else 's'} {shown}{more}"
