"""The leader fires the due slots of periodic jobs (:mod:`recruiter.domain.schedules`).

Each due schedule fires in its own small transaction, fenced by the leader's lease
like a round's writes (:meth:`recruiter.processes.leadership.Leadership.fenced`), just
before a round: it reads (in the transaction) whether the
previous occurrence is unfinished and whether each slot's key is reserved
already, then moves the schedule past the slots (conditional on the
``next_slot``, ``version`` and ``run_now`` read) and inserts each occurrence
with its ``unique_keys`` reservation (scope ``forever``). Its own transaction,
not the round's: a round's transaction is aborted whole by a conflict with a
worker's outcome, and a schedule upserted meanwhile would then abort the
round's assignments too; and reading the reservation first means a duplicate
key (which aborts a transaction on the server) is never written.

Invariant: a slot fires at most once, whatever happens: the reservation of its
key and its job are committed together with the schedule moving past it, by
the lease holder only; a failover, two recruiters, or a firing repeated after a
crash find the key reserved (or the schedule moved on) and fire nothing. A
malformed schedule document (:func:`recruiter.domain.schedule_view.schedule_problem`:
every field checked), or one whose firing fails, is set aside with one warning until
the next safety read, and never stops another schedule or the round.

Waking: the leader keeps the earliest ``next_fire_at`` in memory (:attr:`ScheduleFirer.due_at`)
and sleeps until then; a change to ``schedules`` (the doorbell's change stream)
makes it read again, and so does ``REFRESH_S`` passing (a safety net where
the server has no change streams). It never reads schedules once a second.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import structlog
from bson import ObjectId

from recruiter.domain.documents import WarnOnce
from recruiter.domain.records import Query
from recruiter.domain.schedule_view import schedule_problem
from recruiter.domain.schedules import (
    PRUNE_BATCH,
    Definition,
    definition_of,
    fire_at,
    next_slot,
    occurrence,
    plan_firing,
    reservation_until,
    run_now_key,
    slot_key,
)
from recruiter.domain.unique import Scope, Unique
from recruiter.processes.leadership import Leadership, LostLease
from recruiter.processes.logs import AfterCommit
from recruiter.store import schedules
from recruiter.store.connection import StoreError, first_line
from recruiter.store.layout import AsyncDb, Document
from recruiter.store.transactions import is_conflict

log = structlog.get_logger("recruiter.schedules")

# Schedules fired per transaction; more due ones are fired by the next.
BATCH = 50
# The longest the leader goes without reading the earliest next fire time.
REFRESH_S = 60.0


class ScheduleFirer:
    """Fires due schedules and knows when the next one is due."""

    def __init__(self, db: AsyncDb, warned: WarnOnce, events: AfterCommit) -> None:
        self.db = db
        self.warned = warned
        self.events = events
        self.due_at: datetime | None = None
        self.read_at: datetime | None = None  # None: read again before anything else
        # Schedules not fired until the next safety read: malformed, or a firing failed. Keyed
        # by the id's repr (an ``_id`` written by hand may be a document, which is unhashable).
        self.set_aside: dict[str, tuple[object, str]] = {}

    def changed(self) -> None:
        self.read_at = None

    def due(self, now: datetime) -> bool:
        if self.read_at is None or now - self.read_at >= timedelta(seconds=REFRESH_S):
            return True
        return self.due_at is not None and self.due_at <= now

    def wake_in_s(self, now: datetime) -> float | None:
        """Seconds until the next due slot (or the next safety read)."""
        if self.read_at is None:
            return 0.0
        refresh = (self.read_at + timedelta(seconds=REFRESH_S) - now).total_seconds()
        if self.due_at is None:
            return max(0.0, refresh)
        return max(0.0, min(refresh, (self.due_at - now).total_seconds()))

    async def fire(self, leadership: Leadership, now: datetime) -> int:
        """Fire what is due at ``now``, each schedule in its own fenced transaction; how many
        occurrences. A schedule that is malformed, or whose firing fails, is set aside (with
        one warning) and the others fire: no document stops another schedule or the round."""
        if self.read_at is None or now - self.read_at >= timedelta(seconds=REFRESH_S):
            self.set_aside.clear()  # fixed documents are taken up again at the safety read
        docs = await schedules.read_due(self.db, now, BATCH, exclude=[i for i, _ in self.set_aside.values()])
        fired = 0
        for doc in docs:
            defn = self._definition(doc)
            if defn is None:
                self._set_aside(doc, "malformed")
                continue
            fired += await self._fire_alone(leadership, doc, defn, now)
        self.due_at = now if len(docs) >= BATCH else await schedules.earliest_fire_at(self.db, now)
        self.read_at = now
        return fired

    async def _fire_alone(self, leadership: Leadership, doc: Document, defn: Definition, now: datetime) -> int:
        try:
            with self.events.held():  # logged once this schedule's transaction committed
                async with leadership.fenced() as inside:
                    return await self._fire_one(inside.scheduled.database, doc, defn, now)
        except LostLease:
            raise
        except StoreError as exc:
            if is_conflict(exc):  # written meanwhile (declared, paused): read again next time
                self.changed()
                return 0
            reason = f"firing failed: {first_line(exc)}"
        except Exception as exc:  # noqa: BLE001 - one schedule's data must not stop the others or the round
            reason = f"firing failed: {type(exc).__name__}: {str(exc)[:200]}"
        self._set_aside(doc, reason)
        if self.warned.first(("schedule", doc.get("_id")), reason):
            log.warning("schedule.set_aside", schedule=str(doc.get("_id"))[:100], reason=reason,
                        detail=f"not fired; read again within {REFRESH_S:g}s")
        return 0

    def _set_aside(self, doc: Document, reason: str) -> None:
        self.set_aside[repr(doc.get("_id"))] = (doc.get("_id"), reason)

    def _definition(self, doc: Document) -> Definition | None:
        """The definition of a document the reader finds well-formed; None (one warning) if not."""
        problem = schedule_problem(doc)
        defn = problem if problem is not None else definition_of(doc)
        if not isinstance(defn, str):
            return defn
        if self.warned.first(("schedule", doc.get("_id")), defn):
            log.warning("schedule.malformed", schedule=str(doc.get("_id"))[:100], reason=defn,
                        detail="this schedule is not fired until it is fixed or declared again")
        return None

    async def _fire_one(self, db: AsyncDb, doc: Document, defn: Definition, now: datetime) -> int:
        """The writes of one schedule, inside the transaction; how many occurrences it fired."""
        update: dict[str, Any] = {}
        fired: list[tuple[datetime, str]] = []  # slot (or run-now time), key
        first = doc.get("next_slot")
        if doc.get("paused") is True:
            if doc.get("next_fire_at") is not None:  # paused by hand (mongosh) with a time left
                update["$set"] = {"next_fire_at": None}
        else:
            if not isinstance(first, datetime) or not isinstance(doc.get("next_fire_at"), datetime):
                slot = next_slot(defn, now)  # resumed, or edited: from now on, nothing caught up
                update["$set"] = {"next_slot": slot, "next_fire_at": fire_at(defn, slot)}
            else:
                await self._plan(db, doc, defn, first, now, update, fired)
        asked = doc.get("run_now")
        if isinstance(asked, datetime):
            fired.append((asked, run_now_key(defn.name, asked)))
            update.setdefault("$set", {})["run_now"] = None
        jobs = await self._occurrences(db, defn, fired, now)
        if jobs:
            slot, job_id, _ = jobs[-1]
            update.setdefault("$set", {})["last_fire"] = {"slot": slot, "job": job_id, "at": now}
        if not update:
            return 0
        # Still as read: not edited, moved on, asked to run now, paused or resumed since.
        # $eq: a stored value is matched as a value, never read as an operator ({"$ne": ...}).
        read: Query = {"version": {"$eq": doc.get("version")}, "next_slot": {"$eq": first},
                       "run_now": {"$eq": asked}, "paused": {"$eq": doc.get("paused")},
                       "skipped": {"$eq": doc.get("skipped")}}
        if not await schedules.record_firing(db, defn.name, read, update):
            self.changed()  # changed since it was read: read again, fire nothing now
            return 0
        for slot, job_id, occ in jobs:
            reservation = Unique(occ["unique"]["key"], Scope.FOREVER).reservation(job_id, now)
            reservation["until"] = reservation_until(defn, slot)
            await schedules.insert_occurrence(db, occ, reservation)
            self.events.info("schedule.fired", schedule=defn.name, slot=slot.isoformat(), job_id=str(job_id))
        if jobs:
            await schedules.prune_reservations(db, defn.name, now, PRUNE_BATCH)
        return len(jobs)

    async def _plan(self, db: AsyncDb, doc: Document, defn: Definition, first: datetime, now: datetime,
                    update: dict[str, Any], fired: list[tuple[datetime, str]]) -> None:
        last = doc.get("last_fire")
        last_job = last.get("job") if isinstance(last, dict) else None
        running = defn.overlap == "skip" and last_job is not None and await schedules.is_unfinished(db, last_job)
        plan = plan_firing(defn, first, now, running)
        fired.extend((s, slot_key(defn.name, s)) for s in plan.fire)
        update["$set"] = {"next_slot": plan.next_slot, "next_fire_at": fire_at(defn, plan.next_slot)}
        if plan.skip:
            slot, reason = plan.skip[-1]
            update["$set"]["last_skip"] = {"slot": slot, "reason": reason, "at": now}
            # A $set of the count read (checked an integer), not an $inc: safe whatever is stored.
            update["$set"]["skipped"] = int(doc.get("skipped") or 0) + len(plan.skip) + plan.more_skipped
            # The latest slot skipped and, for an overlap, the job still unfinished: what an
            # operator needs to see why (and a test, that a run which had ended never counts).
            extra = {"waiting_on": str(last_job)} if reason == "overlap" else {}
            self.events.info("schedule.skipped", schedule=defn.name, slots=len(plan.skip), reason=reason,
                             slot=slot.isoformat(), **extra)

    async def _occurrences(self, db: AsyncDb, defn: Definition, fired: list[tuple[datetime, str]],
                           now: datetime) -> list[tuple[datetime, ObjectId, Document]]:
        """The occurrences to insert: those whose key is not reserved yet (fired already)."""
        out = []
        for slot, key in fired:
            if await schedules.is_reserved(db, key):
                continue
            job_id = ObjectId()
            occ = occurrence(defn.job, defn.name, slot, key, job_id, now)
            out.append((slot, job_id, occ))
        return out
