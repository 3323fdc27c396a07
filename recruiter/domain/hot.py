"""Hot entries: the few idle roster entries the leader keeps ready, so an idle cluster starts work fast.

A worker process learns of its work by reading its own roster entries
(:mod:`recruiter.processes.worker.poller`): fast while work is expected, backing
off to ``--poll-to`` while idle. So that an idle cluster is still quick without
every idle process polling fast, the leader marks up to ``HOT_PER_GROUP`` idle
entries per group ``hot`` (a date: until when), prefers them when it hands out
(after the entries holding an outcome, whose processes just recorded one and poll
fast), and a process holding a hot entry polls every ``HOT_POLL_S`` while it is hot and the
entry's slot runs nothing (a slot running a batch or a job held ahead gets no more work before
its outcome, after which its process reads fast anyway).

Invariants:

1. A mark is only a hint: a worker ignores one that is not a date, or is past, or
   further ahead than ``MAX_HOT_AHEAD`` (it would keep a process polling fast),
   and then polls at its own backoff; it still gets its work within ``--poll-to``.
   A 0.1.1 worker ignores the field, and a 0.1.1 leader writes none.
2. Marking costs nothing when nothing changes: the leader writes a mark only for
   an entry newly hot or whose mark is due for renewal (``RENEW_BEFORE``), so an
   idle cluster costs one write every ``HOT_FOR - RENEW_BEFORE`` at most.
3. An assignment removes the entry's mark (:func:`recruiter.store.roster.assign_statement`),
   so a busy entry is never hot and the leader's next round marks another.
4. Only a group the round ran dry keeps hot entries (:func:`dry_groups`): one for which a
   free entry the round offered work got none. A round that gave a job to every entry it
   offered work (a backlog, served ``--round-size`` entries at a time) may leave entries idle,
   but not for want of work: the next rounds serve them, so polling fast for them would be
   reads for nothing (a hot process reads 20 times a second). Such a group's marks are taken
   back (:meth:`recruiter.processes.hot.HotEntries.mark`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from recruiter.domain.clock import utc
from recruiter.domain.placement import is_worker_group

HOT = "hot"
HOT_PER_GROUP = 2
# How often a process holding a hot entry reads while it is hot (or ``--poll-from``, if longer). Each
# hot process reads 20 times a second: about 4 % of a core of the embedded server (a read by _id
# costs it about 2 ms), a few hundredths of a percent on MongoDB. 20 ms (``--poll-from``) cost the
# embedded server 2.5 times that, for a start about 15 ms sooner on average.
HOT_POLL_S = 0.05
HOT_FOR = timedelta(seconds=30)
# A mark with less than this left is written again (with HOT_FOR from now).
RENEW_BEFORE = timedelta(seconds=10)
MAX_HOT_AHEAD = 2 * HOT_FOR


def hot_until(value: object, now: datetime) -> datetime | None:
    """Until when an entry whose ``hot`` field holds ``value`` is hot, as of ``now``; None when it is
    not (absent, not a date, past, or further ahead than ``MAX_HOT_AHEAD``: invariant 1)."""
    if not isinstance(value, datetime):
        return None
    until = utc(value)
    return until if now < until <= now + MAX_HOT_AHEAD else None


def _groups(entry: Mapping[str, object]) -> list[str]:
    work_on = entry.get("work_on")
    if not isinstance(work_on, (list, tuple)):
        return []
    return [g for g in work_on if isinstance(g, str) and not is_worker_group(g)]


def _process(entry: Mapping[str, object]) -> str:
    return str(entry.get("process") or entry.get("_id"))


def dry_groups(asked: Iterable[Mapping[str, object]], offered: Collection[object]) -> set[str]:
    """The groups a round ran dry: those of the free entries it offered work (``asked``) that got
    none (not in ``offered``, the entries it gave work)."""
    return {g for e in asked if e.get("_id") not in offered for g in _groups(e)}


def choose_hot(idle: Sequence[Mapping[str, object]], marked: Mapping[object, datetime], now: datetime,
               per_group: int = HOT_PER_GROUP, groups: Collection[str] | None = None,
               ) -> tuple[dict[object, datetime], list[object]]:
    """The hot entries among ``idle`` (free idle entries, in the leader's order of preference) and
    the ids whose mark is to be written (new, or due for renewal), given ``marked``: the entries
    marked hot and until when.

    Each group any idle entry works on (of ``groups``, if given) gets up to ``per_group`` hot entries: those marked
    already first (a mark stays where it is while its entry is idle), then entries of a process
    that already holds a hot one (one process polling fast serves all its entries), then in
    ``idle``'s order."""
    live = {e["_id"]: until for e in idle if (until := marked.get(e["_id"])) is not None and until > now}
    hot: dict[object, datetime] = {}
    hot_processes: set[str] = set()
    for group in sorted({g for e in idle for g in _groups(e) if groups is None or g in groups}):
        takers = [e for e in idle if group in _groups(e)]
        count = sum(1 for e in takers if e["_id"] in hot)
        while count < per_group:
            rest = [e for e in takers if e["_id"] not in hot]
            if not rest:
                break
            pick = min(rest, key=lambda e: (e["_id"] not in live, _process(e) not in hot_processes))
            hot[pick["_id"]] = live.get(pick["_id"], now)
            hot_processes.add(_process(pick))
            count += 1
    due = [i for i, until in hot.items() if until - now < RENEW_BEFORE]
    for i in due:
        hot[i] = now + HOT_FOR
    return hot, due


def serving_key(now: datetime, hot: Mapping[object, datetime]
                ) -> Callable[[Mapping[str, object]], tuple[bool, bool, datetime, str]]:
    """Sort key of the free entries a round may serve: those holding an outcome first (as
    :func:`recruiter.domain.lanes.serving_order`), then the hot ones, then the longest available,
    then by ``_id``."""
    def key(entry: Mapping[str, object]) -> tuple[bool, bool, datetime, str]:
        since = entry.get("available_since")
        return (not entry.get("outcome"), entry["_id"] not in hot,
                since if isinstance(since, datetime) else now, str(entry["_id"]))
    return key
