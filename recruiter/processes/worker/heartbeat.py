"""Heartbeats from a thread of their own, so nothing a job does can silence them.

A job that blocks the event loop (a CPU-bound ``async def``, a C extension that
holds the loop's thread) would starve an asyncio heartbeat task, and the cleaner
would declare a live worker dead. :class:`HeartbeatThread` beats from a daemon
thread with its own synchronous ``MongoClient``; the worker's event loop checks
once per interval that the thread is alive and starts a new one if it died.

A beat writes the process's one document in ``heartbeats`` (:mod:`recruiter.domain.liveness`;
the writes and the fence read are in :mod:`recruiter.store.heartbeats` and
:mod:`recruiter.store.roster`) with ONE update, however many slots and look-ahead
lanes the process has, never the roster entries a recruiter round writes, so the
two never conflict. The update never creates the document (a registration does):
once the cleaner removed the process as dead, its beats change nothing. It names
each slot with its ``session`` (a reader believes a slot's beat only for the entry
with that session) and says which job each slot runs (``working_token``: the evidence that the attempt started) and what
that job last said of its progress (``progress``, read from memory: ``ctx.progress``
costs no write and adds no beat), and the thread beats early, batched, when a slot
starts a job (:meth:`HeartbeatThread.nudge`).

Every beat with a busy slot then reads the busy slots' roster entries to check their fences: an
entry that is gone, carries another ``session``, or whose assignment
(``assigned_to.<id>``) no longer names the running job has lost its entry
(declared dead, or taken over by a restarted worker with the same id) or its
job (cancelled): ``on_lost`` is told, on the event loop, and the worker halts
the job.

Invariant: a beat never writes a roster entry, writes only its own process's
document and names each slot with its ``session``, and the thread only reads the slots (:func:`slot_views`):
it changes a job's state only through ``on_lost``, on the event loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import structlog
from bson import ObjectId

from recruiter.domain.clock import Clock
from recruiter.domain.liveness import fresh_until, slot_key
from recruiter.domain.records import ProgressDoc, Query, Raw
from recruiter.processes.worker.state import JobState, Slot, SlotPhase
from recruiter.store import heartbeats, roster
from recruiter.store.connection import StoreError, first_line
from recruiter.store.layout import SyncCollections
from recruiter.store.roster import Session

log = structlog.get_logger("recruiter.heartbeat")

JOB_TAKEN_AWAY = "the job was taken away from this worker (cancelled or rescued)"
# A job still running this fraction of an interval after it started is shown at once by
# an early beat (shared by the slots): jobs shorter than that cost no write of their own.
NUDGE_DELAY = 0.25


@dataclass(frozen=True)
class SlotView:
    """What a beat needs to know about one slot, read at the moment of the beat."""

    id: str
    session: Session
    job_id: object  # the running job, if any (else None)
    working_since: datetime | None
    token: object = None  # the running job's lock token
    progress: ProgressDoc | None = None  # what the running job last said of its progress
    in_thread: bool = False  # the running job runs in a thread (a cancel cannot stop it)
    halting: bool = False  # a cancelled job runs on in its thread: the entry is still checked at each beat


def slot_views(slots: Iterable[Slot]) -> list[SlotView]:
    """What the heartbeat reports of each slot that still has its entry (pure).

    A halted job is no longer its slot's to report (a thread may run on), nor is
    one whose outcome is being written: the slot beats as an idle one, so that
    the worker stays alive meanwhile; a thread that runs on is ``halting``, so
    the beat still checks that the entry (which holds the job's slot) is there.
    """
    views = []
    for s in slots:
        if s.phase in (SlotPhase.REPLACED, SlotPhase.LEFT):
            continue
        r = s.running if s.running is not None and s.running.reported else None
        said = r.progress if r else None
        halting = s.running is not None and s.running.state is JobState.HALTED and s.running.in_thread
        views.append(SlotView(s.id, s.session, r.job_id if r else None, r.started_at if r else None,
                              r.token if r else None, said.document() if said else None,
                              in_thread=bool(r and r.in_thread), halting=halting))
    return views


def beat_fields(view: SlotView, now: datetime, interval_s: float) -> Query:
    """What one beat sets in a slot's heartbeat document (pure)."""
    return {"last_seen_at": now, "fresh_until": fresh_until(now, interval_s), "working": view.job_id is not None,
            "working_on": view.job_id, "working_token": view.token if view.job_id is not None else None,
            "working_since": view.working_since, "working_in_thread": view.in_thread and view.job_id is not None,
            "progress": view.progress if view.job_id is not None else None}


def process_beat_fields(views: Sequence[SlotView], now: datetime, interval_s: float) -> Query:
    """What one beat sets in the process's heartbeat document: when, and every slot's part (pure).

    The whole ``slots`` document is set, so a slot that left is gone from it."""
    slots: Query = {}
    for v in views:
        fields = beat_fields(v, now, interval_s)
        slots[slot_key(v.id)] = {"id": v.id, "session": v.session,
                                 **{k: fields[k] for k in ("working", "working_on", "working_token",
                                                           "working_since", "working_in_thread", "progress")}}
    return {"last_seen_at": now, "fresh_until": fresh_until(now, interval_s), "ids": [v.id for v in views],
            "slots": slots}


def lost_slots(slots: Sequence[SlotView], entries: Mapping[str, Raw]) -> list[tuple[SlotView, str]]:
    """The slots whose fence failed, and why, given their current roster entries (pure)."""
    lost = []
    for s in slots:
        entry = entries.get(s.id)
        if entry is None:
            lost.append((s, "the worker was declared dead and removed from the roster"))
        elif entry.get("session") != s.session:
            lost.append((s, "another process took over this worker id"))
        elif s.job_id is not None and _assigned(entry, s.id) != s.job_id:
            lost.append((s, JOB_TAKEN_AWAY))
    return lost


def _assigned(entry: Raw, slot_id: str) -> object:
    assigned = entry.get("assigned_to")
    return assigned.get(slot_id) if isinstance(assigned, dict) else None


def beat(c: SyncCollections, clock: Clock, interval_s: float, slots: Sequence[SlotView],
         key: ObjectId | None = None) -> list[tuple[SlotView, str]]:
    """One heartbeat for every slot (one write: the document of process ``key``, or without
    one each slot's own document), then a read of the busy slots' fences.

    An idle slot needs no read: it learns that it lost its entry when it next
    reads the entry (a change stream reports the removal or the takeover).
    """
    if not slots:
        return []
    now = clock.now()
    if key is not None:
        heartbeats.write_process_beat(c.heartbeats, key, process_beat_fields(slots, now, interval_s))
    else:
        heartbeats.write_beats(c.heartbeats, [(s.id, s.session, beat_fields(s, now, interval_s)) for s in slots])
    busy = [s for s in slots if s.job_id is not None or s.halting]
    if not busy:
        return []
    return lost_slots(busy, roster.read_fences(c.roster, [s.id for s in busy]))


class HeartbeatThread:
    """Beats every ``interval_s`` from a daemon thread until stopped, and early after a nudge.

    A nudge (a slot started a job) makes the thread look again ``NUDGE_DELAY``
    of an interval later: if a job that no beat has shown yet still runs, it
    beats then. Short jobs finish first and cost nothing; the jobs started
    within one delay share one beat.
    """

    def __init__(self, c: SyncCollections, clock: Clock, interval_s: float,
                 view: Callable[[], Sequence[SlotView]],
                 on_lost: Callable[[SlotView, str], None], key: ObjectId | None = None) -> None:
        """``key``: the ``_id`` of the process's heartbeat document (None: each slot has its own)."""
        self.c = c
        self.key = key
        self.clock = clock
        self.interval_s = interval_s
        self.view = view
        self.on_lost = on_lost
        self._stop = threading.Event()
        self._nudged = threading.Event()
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
        self._nudged.set()

    def nudge(self) -> None:
        """Beat soon (a slot started a job): the heartbeat shows the attempt started."""
        self._nudged.set()

    def _run(self) -> None:
        shown: set[object] = set()  # the attempts (lock tokens) the last beat showed running
        due = 0.0
        while not self._stop.is_set():
            views = self.view()
            if time.monotonic() >= due or any(v.job_id is not None and v.token not in shown for v in views):
                try:
                    for slot, reason in beat(self.c, self.clock, self.interval_s, views, self.key):
                        self.on_lost(slot, reason)
                except StoreError as exc:
                    log.warning("heartbeat.failed", error=first_line(exc))
                shown = {v.token for v in views if v.job_id is not None}
                due = time.monotonic() + self.interval_s
            if self._nudged.wait(max(0.0, due - time.monotonic())):
                self._stop.wait(self.interval_s * NUDGE_DELAY)
                self._nudged.clear()
