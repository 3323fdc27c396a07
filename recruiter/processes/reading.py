"""The reads of a recruiter round that choose its jobs: candidates, pause switches, the cursor.

:class:`CandidateReader` keeps what stays true between rounds: the read-ahead's
knowledge of the ready jobs (:mod:`recruiter.store.readahead`), the fairness
cursor as last committed, the pause switches as last read. A round asks it to
:meth:`~CandidateReader.select` and gets a :class:`Picked` value back: the
selection, the candidate documents read whole, the malformed jobs met.

Invariant: nothing here writes. Reads run before the round's transaction
(reads need no fence); the cursor the round moved is taken as current only
once the round has committed (:meth:`CandidateReader.committed`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import cast

import structlog

from recruiter.domain.candidates import Query, candidate_from, plan_round
from recruiter.domain.control import Paused, cursor_changes, cursor_document, read_cursor, read_switches
from recruiter.domain.documents import Malformed, WarnOnce, check_job
from recruiter.domain.records import JobDoc
from recruiter.domain.selection import DEFAULT_SCHEME, Candidate, CountingScheme, Cursor, FreeWorker, Selection
from recruiter.processes.rounds import CursorWrite
from recruiter.store import metadata, scheduled
from recruiter.store.layout import Collections, Document
from recruiter.store.readahead import ReadAhead

log = structlog.get_logger("recruiter.recruiter")


@dataclass
class Picked:
    """What a round's candidate reads found: the selection, the documents read whole (locking
    one turns it into the copy its worker receives, with no second read), the malformed jobs met."""

    selection: Selection
    documents: dict[object, Document] = field(default_factory=dict)
    malformed: list[Malformed] = field(default_factory=list)


class CandidateReader:
    """The leader's reads of the queue and of its switches (see the module doc)."""

    def __init__(self, c: Collections) -> None:
        self.c = c  # outside any transaction: reads only
        self.warned = WarnOnce()
        # What this process knows of the ready jobs between rounds: hints that stay valid
        # whoever leads in between, so they are kept across leaderships.
        self.readahead = ReadAhead(partial(scheduled.find_candidates, c.scheduled))
        # Fairness cursor as last committed, and the epoch it was loaded for; pause switches as last read.
        self.cursor = Cursor()
        self.cursor_epoch: int | None = None
        self.cursor_reset = False  # the stored cursor was malformed: the next save replaces it
        self.paused = Paused()

    async def warm(self, now: datetime) -> None:
        await self.readahead.warm(now)

    def cursor_write(self, cursor: Cursor) -> CursorWrite | None:
        """What a round that moved the cursor to ``cursor`` writes (:class:`CursorWrite`)."""
        if self.cursor_reset:
            return CursorWrite(cursor_document(cursor), replace=True)
        changes = cursor_changes(self.cursor, cursor)
        return None if changes is None else CursorWrite(changes, replace=False)

    def committed(self, selection: Selection) -> None:
        """The round that chose ``selection`` committed: its cursor is the current one."""
        self.cursor = selection.cursor
        self.cursor_reset = False

    async def _load_cursor(self, epoch: int | None) -> None:
        """Read the stored cursor once per leadership (a new leader goes on where the last stopped)."""
        if self.cursor_epoch == epoch:
            return
        self.cursor, problem = read_cursor(await metadata.read_cursor(self.c.metadata))
        self.cursor_reset = problem is not None
        if problem is not None:
            log.warning("cursor.malformed", reason=problem, detail="the fairness turns start afresh")
        self.cursor_epoch = epoch

    async def select(self, workers: Sequence[FreeWorker], now: datetime, epoch: int | None,
                     scheme: CountingScheme = DEFAULT_SCHEME) -> Picked:
        """Choose jobs for ``workers`` by the fairness policy (the new cursor is saved
        with the round's writes).

        The reads are planned by :func:`recruiter.domain.candidates.plan_round`; the
        first one also reads the pause switches, so a pause is obeyed from the
        next round on. If the switches changed since the last round, the round
        is planned again with them."""
        await self._load_cursor(epoch)
        picked = Picked(Selection([], self.cursor))
        for _ in range(3):
            paused = self.paused
            # A worker does not take a paused group; '*' workers' reads leave paused groups out.
            usable = [FreeWorker(w.id, tuple(g for g in w.groups if g not in paused.groups), process=w.process)
                      for w in workers]
            plan = plan_round(usable, self.cursor, now, scheme)
            queries = next(plan)
            rows = await self._read(picked, queries, now, paused, with_switches=True)
            if self.paused == paused:
                break
        while True:
            try:
                queries = plan.send(rows)
            except StopIteration as stop:
                picked.selection = stop.value
                return picked
            rows = await self._read(picked, queries, now, paused, with_switches=False)

    async def _read(self, picked: Picked, queries: list[Query], now: datetime, paused: Paused,
                    *, with_switches: bool) -> list[list[Candidate]]:
        """Answer ``queries`` through the read-ahead (:mod:`recruiter.store.readahead`: reads
        served from the candidates index on MongoDB and on the embedded server alike);
        with ``with_switches``, also read the pause switches, at the same time.
        Whole documents are checked (:func:`recruiter.domain.documents.check_job`): a malformed
        one is never a candidate, the round quarantines it; rows the read-ahead answered
        from keys are read whole first (one find by id, in rounds that met new jobs)."""
        if with_switches:
            docs, switches = await asyncio.gather(self.readahead.answer(queries, now, paused),
                                                  metadata.read_switches(self.c.metadata))
            self.paused = read_switches(switches, self.warned, log)
        else:
            docs = await self.readahead.answer(queries, now, paused)
        whole, unplaceable = self.readahead.take_found()
        await self._meet_unplaceable(picked, unplaceable)
        keys_only = [d["_id"] for found in docs for d in found if d["_id"] not in whole]
        if keys_only:  # rows a keys read answered (new tenants, bursts): read them whole, once
            whole.update((d["_id"], d) for d in await scheduled.read_jobs(self.c.scheduled, keys_only))
        rows: list[list[Candidate]] = [[] for _ in queries]
        for i, found in enumerate(docs):
            for key in found:
                doc = whole.get(key["_id"])
                if doc is None:
                    continue  # gone since its keys were read
                if (m := check_job(doc)) is not None:
                    picked.malformed.append(m)  # never a candidate; the round quarantines it
                    continue
                rows[i].append(candidate_from(cast(JobDoc, doc), now))
                picked.documents[doc["_id"]] = doc
        return rows

    async def _meet_unplaceable(self, picked: Picked, ids: list[object]) -> None:
        """Jobs whose keys the read-ahead could not place, read whole to be quarantined by this round."""
        if ids:
            for doc in await scheduled.read_unlocked_jobs(self.c.scheduled, ids):
                if (m := check_job(doc)) is not None:
                    picked.malformed.append(m)
