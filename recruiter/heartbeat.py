"""Heartbeats from a thread of their own, so nothing a job does can silence them.

A job that blocks the event loop (a CPU-bound ``async def``, a C extension that
holds the loop's thread) would starve an asyncio heartbeat task, and the cleaner
would declare a live worker dead. :class:`HeartbeatThread` beats from a daemon
thread with its own synchronous ``MongoClient``; the worker's event loop checks
once per interval that the thread is alive and starts a new one if it died.

Every beat is fenced: an idle slot's update is conditional on its roster entry
still carrying this process's ``session``; a busy slot's also on its assignment
(``assigned_to.<id>``) still naming the running job. A slot whose update finds
nothing has lost its entry (declared dead, or taken over by a restarted worker
with the same id) or its job (cancelled, taken back): ``on_lost`` is told, on
the event loop, and the worker halts the job.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import structlog
from pymongo import UpdateOne
from pymongo.errors import PyMongoError

from recruiter.clock import Clock
from recruiter.connection import first_line

log = structlog.get_logger("recruiter.heartbeat")

JOB_TAKEN_AWAY = "the job was taken away from this worker (cancelled or rescued)"


@dataclass(frozen=True)
class SlotView:
    """What a beat needs to know about one slot, read at the moment of the beat."""

    id: str
    session: Any
    job_id: Any | None  # the running job, if any
    working_since: Any | None


def beat_ops(slots: Sequence[SlotView], now: Any) -> list[UpdateOne]:
    """One conditional update per slot (pure; see the module doc for the conditions)."""
    ops = []
    for s in slots:
        filter_: dict[str, Any] = {"_id": s.id, "session": s.session}
        set_: dict[str, Any] = {"last_seen_at": now}
        if s.job_id is not None:
            filter_[f"assigned_to.{s.id}"] = s.job_id
            set_.update(working=True, working_on=s.job_id, working_since=s.working_since)
        ops.append(UpdateOne(filter_, {"$set": set_}))
    return ops


def lost_slots(slots: Sequence[SlotView], entries: dict[str, dict[str, Any]]) -> list[tuple[SlotView, str]]:
    """The slots whose fence failed, and why, given their current roster entries (pure)."""
    lost = []
    for s in slots:
        entry = entries.get(s.id)
        if entry is None:
            lost.append((s, "the worker was declared dead and removed from the roster"))
        elif entry.get("session") != s.session:
            lost.append((s, "another process took over this worker id"))
        elif s.job_id is not None and (entry.get("assigned_to") or {}).get(s.id) != s.job_id:
            lost.append((s, JOB_TAKEN_AWAY))
    return lost


def beat(roster: Any, clock: Clock, slots: Sequence[SlotView]) -> list[tuple[SlotView, str]]:
    """One heartbeat for every slot in one round trip (two or three when a fence failed)."""
    if not slots:
        return []
    result = roster.bulk_write(beat_ops(slots, clock.now()), ordered=False)
    if result.matched_count == len(slots):
        return []
    entries = {d["_id"]: d for d in roster.find(
        {"_id": {"$in": [s.id for s in slots]}}, {"session": 1, "assigned_to": 1})}
    lost = lost_slots(slots, entries)
    taken = [s for s, reason in lost if reason == JOB_TAKEN_AWAY]
    if taken:
        # The worker itself is alive: beat for those slots as idle ones, so that it is
        # not taken for dead if its event loop is too busy to halt the job soon.
        roster.bulk_write(beat_ops([replace(s, job_id=None) for s in taken], clock.now()), ordered=False)
    return lost


class HeartbeatThread:
    """Beats every ``interval_s`` from a daemon thread until stopped."""

    def __init__(self, roster: Any, clock: Clock, interval_s: float,
                 view: Callable[[], Sequence[SlotView]],
                 on_lost: Callable[[SlotView, str], None]) -> None:
        self.roster = roster
        self.clock = clock
        self.interval_s = interval_s
        self.view = view
        self.on_lost = on_lost
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.restarts = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="recruiter-heartbeat", daemon=True)
        self._thread.start()

    def ensure_alive(self) -> None:
        """Start a new thread if the current one died (supervision, called from the event loop)."""
        if self._stop.is_set() or (self._thread is not None and self._thread.is_alive()):
            return
        self.restarts += 1
        log.warning("heartbeat.restarted", restarts=self.restarts)
        self.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for slot, reason in beat(self.roster, self.clock, self.view()):
                    self.on_lost(slot, reason)
            except PyMongoError as exc:
                log.warning("heartbeat.failed", error=first_line(exc))
            self._stop.wait(self.interval_s)
