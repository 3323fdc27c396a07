"""The history over time as the dashboard and ``recruiter stats --history`` show it (read from ``timeline``).

A range (:data:`RANGES`) picks a resolution: minute buckets up to a day, hour buckets up to 30
days (what the leader keeps, :data:`recruiter.domain.timeline.KEPT`). Its series are made by
:func:`recruiter.domain.timeline.merge`: each bucket summed over the leaders' epochs, a bucket
no leader recorded a gap.

Invariant: bounded reads (one indexed ``find`` of at most :data:`MAX_DOCUMENTS`, one
``distinct`` for the group names, at most :data:`MAX_GROUPS` of them); a stored document
that is malformed is counted aside, never shown as a figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from recruiter.domain.timeline import HOUR, MINUTE, Resolution, Series, bucket_start, merge
from recruiter.store import SyncDb, read_buckets, read_groups

RANGES: dict[str, tuple[Resolution, timedelta]] = {
    "1h": (MINUTE, timedelta(hours=1)),
    "6h": (MINUTE, timedelta(hours=6)),
    "24h": (MINUTE, timedelta(days=1)),
    "7d": (HOUR, timedelta(days=7)),
    "30d": (HOUR, timedelta(days=30)),
}
DEFAULT_RANGE = "1h"
MAX_GROUPS = 200
MAX_DOCUMENTS = 50_000


@dataclass(frozen=True)
class History:
    """The series of one range: the whole queue's, and the group's asked for (if any)."""

    range: str
    since: datetime
    until: datetime  # the last bucket's start (the current one, still counting)
    total: Series
    group: str | None
    of_group: Series | None
    groups: list[str]  # the groups with a bucket in the range (at most MAX_GROUPS), to choose from
    capped: bool  # MAX_DOCUMENTS were read: the oldest part of the range may be missing

    @property
    def malformed(self) -> int:
        return self.total.malformed


def parse_range(text: str) -> str:
    """A range name (``1h``, ``6h``, ``24h``, ``7d``, ``30d``); ValueError saying which are known."""
    if text not in RANGES:
        raise ValueError(f"unknown range {text!r}: one of {', '.join(RANGES)}")
    return text


def history(db: SyncDb, now: datetime, range_name: str = DEFAULT_RANGE, group: str | None = None) -> History:
    """The history of ``range_name`` up to ``now``, of the whole queue and of ``group`` if given."""
    resolution, length = RANGES[parse_range(range_name)]
    until = bucket_start(now, resolution)
    since = bucket_start(now - length, resolution) + (timedelta(minutes=1) if resolution == MINUTE
                                                      else timedelta(hours=1))
    wanted: Sequence[str | None] = [None] if group is None else [None, group]
    docs = read_buckets(db, resolution, since, until, list(wanted), MAX_DOCUMENTS)
    total = merge(docs, resolution, since, until, None)
    of_group = None if group is None else merge(docs, resolution, since, until, group)
    groups = read_groups(db, resolution, since, until, MAX_GROUPS)
    return History(range_name, since, until, total, group, of_group, groups, len(docs) >= MAX_DOCUMENTS)
