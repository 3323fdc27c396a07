"""A slot's registration: entering the roster, or taking over the entry a dead process left.

A slot enters the roster with a fresh ``session`` id (:meth:`Registration.register`) and is
named in its process's heartbeat document; only then may the leader give it work. Where its id
is still there from an earlier process, the slot takes that entry over (:meth:`Registration.recover`):
the jobs that process held are returned or unlocked as crashed attempts, its unapplied outcome is
kept for the recruiter, and the new ``session`` fences out any write the old process still makes.

Invariant: an entry is taken over only from a process that cannot still be running: gone from
this machine, or silent for ``MISSED_BEATS_FOR_RESTART`` heartbeats; otherwise the start is refused
(:class:`WorkerIdTaken`), and nothing is written.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import cast

import structlog

from recruiter.domain import batching, versions
from recruiter.domain.clock import Clock
from recruiter.domain.documents import outcome_problem
from recruiter.domain.events import WorkerRegistered
from recruiter.domain.liveness import (
    believed_interval_s,
    date_or_none,
    heartbeat_document,
    process_document,
    rescue_update,
    slot_document,
)
from recruiter.domain.outcome import jobs_referenced_by
from recruiter.domain.placement import worker_group
from recruiter.domain.records import Query, Raw
from recruiter.processes.events import Bus
from recruiter.processes.worker.config import MISSED_BEATS_FOR_RESTART, WorkerConfig
from recruiter.processes.worker.state import Slot
from recruiter.store import heartbeats, roster, scheduled
from recruiter.store.layout import Collections, Document

log = structlog.get_logger("recruiter.worker")


class WorkerIdTaken(RuntimeError):
    def __init__(self, worker_id: str, entry: Raw, silent: timedelta) -> None:
        super().__init__(
            f"worker id {worker_id!r} is in use by pid {entry.get('pid')} on {entry.get('hostname')} "
            f"(last heartbeat {silent.total_seconds():.1f}s ago); stop it first "
            f"(recruiter workers stop {worker_id}) or choose another --id"
        )


def process_exists(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kept_outcome(slot_id: str, stored: object) -> Raw | None:
    """The outcome a previous process of our id recorded, kept for the recruiter if it is well-formed.
    A malformed one is dropped, said (its entry would be skipped by every round, and so this slot),
    and the job it names is rescued with the others the entry held."""
    if not stored:
        return None
    problem = outcome_problem(stored, "outcome")
    if problem is None:
        return cast(Raw, stored)
    log.warning("worker.malformed_outcome_dropped", worker_id=slot_id, reason=problem[:300],
                detail="the outcome the previous process of this id left cannot be applied; its job is "
                       "rescued as that process's crashed attempt")
    return None


class Registration:
    """Registers the slots of one process (``pid`` on ``hostname``) in the roster."""

    def __init__(self, c: Collections, clock: Clock, config: WorkerConfig, *,
                 pid: int, hostname: str, process: str = "", bus: Bus | None = None) -> None:
        self.process = process
        self.c = c
        self.bus = bus or Bus.logging()
        self.clock = clock
        self.config = config
        self.pid = pid
        self.hostname = hostname
        # The process's heartbeat document (recruiter.domain.liveness); None: one per entry.
        self.beat_key = heartbeats.process_key(process)

    def process_id(self, slot: Slot) -> str:
        """The id the process was started with (``--id``): its slots are ``ID`` or ``ID-0``, ``ID-1``...
        (and their look-ahead lanes ``ID~1``, ``ID-0~1``..., :mod:`recruiter.domain.lanes`)."""
        return slot.runner_id if self.config.concurrency == 1 else slot.runner_id.rsplit("-", 1)[0]

    def document(self, slot: Slot, now: datetime) -> Query:
        """A fresh entry for ``slot``, available from ``now``. It also takes the reserved group
        of the jobs aimed at its process (``@worker:ID``, :mod:`recruiter.domain.placement`)."""
        return {
            "_id": slot.id,
            "work_on": [*self.config.groups, worker_group(self.process_id(slot))],
            "available": True,
            "available_since": now,
            "created_at": now,
            "pid": self.pid,
            "hostname": self.hostname,
            "session": slot.session,
            "heartbeat_interval_s": self.config.heartbeat_interval_s,
            "runner": slot.runner_id,
            "lane": slot.lane,
            "lanes": slot.lanes,
            # Batch lanes: only --prefetch + 1 of them are always filled (recruiter.domain.batching).
            **({batching.FIELD: self.config.prefetch} if self.config.batch > self.config.prefetch else {}),
            "process": self.process or slot.runner_id,
            versions.FIELD: versions.record(),  # read by status and by a leader of a later release
            roster.FREED: roster.freed_mark(),  # the leader reads it (recruiter.store.roster.FREED)
        }

    async def register(self, slot: Slot) -> None:
        """Enter the roster; if the id is still there from a dead process, recover it first."""
        await self.register_all([slot])

    async def register_all(self, slots: Sequence[Slot]) -> None:
        """Enter the roster with each of ``slots`` (an id still there from a dead process recovered
        first), then name them all in the process's heartbeat document in one write. An entry is
        given no work until that document names it with its session (recruiter.domain.liveness),
        so the leader sees the process's slots come all at once: named one at a time, 20-30 ms
        apart, a first round could see one slot alone and hand it, ahead, the jobs meant for
        the others (one behind a long job of its own)."""
        for slot in slots:
            await self._enter(slot)
        if not slots:
            return
        # The reserved group of the jobs aimed at this process: the cleaner reads it if it
        # removes the slot as dead.
        group = worker_group(self.process_id(slots[0]))
        if self.beat_key is not None:
            process = process_document(self.process, self.clock.now(), self.config.heartbeat_interval_s,
                                       self.pid, self.hostname, group)
            await heartbeats.register_slots(self.c.heartbeats, self.beat_key, process,
                                            [slot_document(s.id, s.session) for s in slots])
        else:
            for slot in slots:
                beat = heartbeat_document(slot.id, slot.session, self.clock.now(), self.config.heartbeat_interval_s,
                                          self.pid, self.hostname)
                beat["worker_group"] = group
                await heartbeats.write_first_beat(self.c.heartbeats, beat)
        for slot in slots:
            self.bus.emit(WorkerRegistered(slot.id, tuple(self.config.groups), self.pid))  # logs worker.registered

    async def _enter(self, slot: Slot) -> None:
        slot.session = roster.new_session()
        while True:
            now = self.clock.now()
            if await roster.insert_entry(self.c.roster, self.document(slot, now)):
                return
            old = await roster.read_entry(self.c.roster, slot.id)
            if old is not None and await self.recover(slot, old, now):
                return

    async def recover(self, slot: Slot, old: Document, now: datetime) -> bool:
        """Take over the entry a previous process with our id left, and release its jobs.

        Refused (:class:`WorkerIdTaken`) while that process still heartbeats. Its
        unapplied outcome is kept for the recruiter; the jobs it was given or was
        running are returned or unlocked as crashed attempts, as its heartbeats
        tell (:func:`recruiter.domain.liveness.rescue_update`). The takeover changes
        ``session``, so if the old process was only paused, its writes are
        refused from now on. Returns False when the entry changed under us (read
        it again).
        """
        beat = await heartbeats.read_entry_beat(self.c.heartbeats, old)  # None: not that entry's
        seen = date_or_none((beat or old).get("last_seen_at"))
        self._refuse_if_alive(slot, old, beat, now - seen if seen is not None else None)
        entry = self.document(slot, now)
        entry.update(available=False, recovering=True)
        outcome = kept_outcome(slot.id, old.get("outcome"))
        if outcome is not None:
            entry["outcome"] = outcome
        if not await roster.take_over_entry(self.c.roster, old, entry):
            return False
        held = jobs_referenced_by(old) - ({outcome["job"]} if outcome is not None else set())
        jobs = await scheduled.read_held_jobs(self.c.scheduled, held, slot.id)
        reason = (f"worker {slot.id} (pid {old.get('pid')} on {old.get('hostname')}) was restarted; "
                  f"last seen {seen.isoformat() if seen else 'never'}")
        await scheduled.rescue_jobs(self.c.scheduled, [rescue_update(j, old, beat, now, reason)[1] for j in jobs])
        await roster.release_entry(self.c.roster, slot.id, slot.session, self.clock.now(), stopping=False,
                                   recovered=True)
        log.warning("worker.recovered", worker_id=slot.id, previous_pid=old.get("pid"),
                    previous_hostname=old.get("hostname"), released=[str(j["_id"]) for j in jobs],
                    kept_outcome=bool(old.get("outcome")))
        return True

    def _refuse_if_alive(self, slot: Slot, old: Document, beat: Document | None, silent: timedelta | None) -> None:
        """Raise :class:`WorkerIdTaken` if the process that left ``old`` may still live."""
        # The previous process's interval, as read (untrusted): ours when it is not one to believe.
        stored = believed_interval_s((beat or old).get("heartbeat_interval_s"))
        interval = stored if stored is not None else self.config.heartbeat_interval_s
        # On this machine we can see whether its process is gone; elsewhere, its heartbeat tells.
        gone_here = old.get("hostname") == self.hostname and not process_exists(old.get("pid"))
        if not gone_here and silent is not None and silent < timedelta(seconds=MISSED_BEATS_FOR_RESTART * interval):
            raise WorkerIdTaken(slot.id, old, silent)
