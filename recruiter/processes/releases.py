"""Releases side by side where processes meet (the skew rule: :mod:`recruiter.domain.versions`).

- The leader gives no work to a roster entry whose release does not work beside its own
  (:meth:`RosterReleases.beside`): one warning per entry, naming both versions and what to do.
  Its outcomes are still applied and the cleaner still removes it when it dies: nothing it
  holds is stuck, only no more is handed to it.
- A worker refuses to start while a lease (the recruiter's, the cleaner's) is held by a
  release that does not work beside its own (:func:`refuse_leaders`): one line naming both
  versions, before it registers (such a leader may not read what this worker writes, and
  would give it no work, or take it for dead).

Invariant: a document that records no release is read as :data:`recruiter.domain.versions.UNRECORDED`
(the newest it can be), so this release, which works beside that one, refuses none of them.
"""

from __future__ import annotations

from datetime import datetime

import structlog

from recruiter.domain import versions
from recruiter.domain.documents import WarnOnce
from recruiter.store.clock import ServerClock
from recruiter.store.layout import AsyncDb, Collections, Document
from recruiter.store.metadata import read_leases_async

log = structlog.get_logger("recruiter.recruiter")


class ReleaseRefused(ValueError):
    """This process and a leader of another release do not work side by side (one line: both versions)."""


class RosterReleases:
    """What the leader keeps to warn once per roster entry of a release it does not work beside."""

    def __init__(self) -> None:
        self.warned = WarnOnce()
        self.refused = 0  # entries refused so far (warned once each)

    def beside(self, lanes: list[tuple[Document, int]]) -> list[tuple[Document, int]]:
        """The free ``lanes`` (entry, depth) whose entry's release works beside this one."""
        kept = []
        for entry, depth in lanes:
            line = versions.refusal(versions.recorded(entry), "worker")
            if line is None:
                kept.append((entry, depth))
            elif self.warned.first(("release", entry.get("_id")), line):
                self.refused += 1
                log.warning("worker.release_refused", worker_id=str(entry.get("_id"))[:100],
                            release=versions.recorded(entry).shown, this_release=versions.RELEASE, reason=line,
                            detail="this worker is given no work; what it holds is applied as usual")
        return kept


def leaders_refusing(leases: list[Document], now: datetime) -> list[str]:
    """One line per lease held at ``now`` by a release that does not work beside this one (pure)."""
    lines = []
    for lease in leases:
        expires = lease.get("expires_at")
        if not isinstance(expires, datetime) or expires <= now:
            continue
        role = "recruiter" if lease.get("_id") == "recruiter" else "cleaner"
        line = versions.refusal(versions.recorded(lease, owner=lease.get("owner")), f"leading {role}")
        if line is not None:
            lines.append(f"{line}; lease held by {str(lease.get('owner'))[:100]}")
    return lines


async def refuse_leaders(db: AsyncDb) -> None:
    """Raise :class:`ReleaseRefused` (its first line) if a lease is held by a release this one does not
    work beside. Judged on the server's clock: a few reads, once, at a worker's start."""
    clock = ServerClock()
    await clock.calibrate(db.client)
    lines = leaders_refusing(await read_leases_async(Collections.of(db).metadata), clock.now())
    if lines:
        raise ReleaseRefused(f"worker refused to start: {lines[0]}")
