"""The leader's view of the roster entries a round works on, kept from a change stream.

A round works on the entries that are available or hold an outcome
(:func:`recruiter.store.roster.read_round_entries`). Reading them all every round
costs the number of slots, whatever changed. :class:`RosterView` reads them whole
once, then keeps them from a change stream on ``roster``: each round it takes the
events that came since the last one (one ``getMore``) and reads again only the
entries they name (one ``find`` by ``_id``). So a round's roster reads grow with
what changed (outcomes recorded, slots freed, workers come and gone), not with the
roster.

Invariants:

- The view is only a cache. Every write a round makes is conditional on what it
  reads (an assignment on ``available``, an outcome's clearing on its token, ...), so an
  entry seen a little late costs at most a wasted write, never a wrong one.
- Nothing is missed: the stream is opened before the whole read, so every change
  after that read reaches the view. A stream that fails, ends, or cannot be opened
  makes the next round read the roster whole (and open a new stream), and the view
  is read whole again at least every ``full_every_s`` anyway, as a check.
- Where the server has no change streams, every round reads the roster whole, as
  before.
- After a round commits, :meth:`assigned` and :meth:`cleared` note what its own
  writes changed, so the next round does not wait for their events to see them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

import structlog
from pymongo.errors import OperationFailure, PyMongoError

from recruiter.store.connection import first_line
from recruiter.store.layout import AsyncColl, Document
from recruiter.store.roster import ROUND_FIELDS_LEFT_OUT, read_round_entries
from recruiter.store.wakeup import STREAMS_UNSUPPORTED, Stream, close_quietly, unless_ended

log = structlog.get_logger("recruiter.recruiter")

# Events are only told apart by the entry they name: the view reads that entry again.
PIPELINE: list[dict[str, Any]] = [
    {"$match": {"operationType": {"$in": ["insert", "update", "replace", "delete"]}}},
    {"$project": {"operationType": 1, "documentKey": 1}},
]
# How long a round's look at the stream may wait for events (it must not wait: the round goes on).
DRAIN_AWAIT_MS = 1
# Most events taken in one round; past that, the view is read whole (a burst of changes).
MAX_EVENTS = 5_000


def in_round(entry: Mapping[str, object]) -> bool:
    """Whether a round works on ``entry``: what :func:`read_round_entries` selects."""
    outcome = entry.get("outcome")
    return entry.get("available") is True or (isinstance(outcome, Mapping) and "token" in outcome)


class RosterView:
    """The entries a round works on (available, or holding an outcome), by ``_id`` (see the module doc)."""

    def __init__(self, roster: AsyncColl, *, full_every_s: float = 10.0, enabled: bool = True) -> None:
        self.roster = roster
        self.full_every_s = full_every_s
        self.enabled = enabled  # False: read whole every round (recruiter start --roster-reads full)
        self.entries: dict[object, Document] = {}
        self.stream: Stream | None = None
        self.loaded_at: float | None = None
        self.supported = True
        # What the last call read, for the benchmarks: "whole" or "changes", and how many entries.
        self.last_read: tuple[str, int] = ("whole", 0)

    async def read(self) -> list[Document]:
        """The entries as of now: the changes since the last call, or the whole roster."""
        loop = asyncio.get_running_loop()
        if (not self.enabled or not self.supported or self.stream is None or self.loaded_at is None
                or loop.time() - self.loaded_at >= self.full_every_s):
            return await self._whole()
        try:
            changed, deleted = await self._drain()
        except PyMongoError as exc:
            log.info("roster_view.reload", reason=first_line(exc))
            await self.close()
            return await self._whole()
        if changed is None:  # too many changes at once: cheaper to read it all
            return await self._whole()
        for key in deleted:
            self.entries.pop(key, None)
        if changed:
            fresh = {d["_id"]: d for d in await self.roster.find(
                {"_id": {"$in": list(changed)}}, {f: 0 for f in ROUND_FIELDS_LEFT_OUT}).to_list()}
            for key in changed:
                doc = fresh.get(key)
                if doc is not None and in_round(doc):
                    self.entries[key] = doc
                else:
                    self.entries.pop(key, None)
        self.last_read = ("changes", len(changed))
        return list(self.entries.values())

    async def _whole(self) -> list[Document]:
        """Open the stream (first, so no change after the read is missed), then read everything."""
        if self.enabled and self.supported:
            await self.close()
            try:
                self.stream = await self.roster.watch(PIPELINE, max_await_time_ms=DRAIN_AWAIT_MS)
            except OperationFailure as exc:
                if exc.code in STREAMS_UNSUPPORTED:
                    self.supported = False
                    log.info("roster_view.unavailable", reason=first_line(exc))
                else:
                    log.info("roster_view.no_stream", reason=first_line(exc))
            except PyMongoError as exc:
                log.info("roster_view.no_stream", reason=first_line(exc))
        docs = await read_round_entries(self.roster)
        self.entries = {d["_id"]: d for d in docs}
        self.loaded_at = asyncio.get_running_loop().time()
        self.last_read = ("whole", len(docs))
        return list(docs)

    async def _drain(self) -> tuple[set[object] | None, set[object]]:
        """The entries changed and deleted since the last look; (None, ...) past ``MAX_EVENTS``."""
        assert self.stream is not None
        changed: set[object] = set()
        deleted: set[object] = set()
        for _ in range(MAX_EVENTS):
            event = unless_ended(await self.stream.try_next(), self.stream.alive)
            if event is None:
                return changed, deleted
            key = (event.get("documentKey") or {}).get("_id")
            if event.get("operationType") == "delete":
                deleted.add(key)
                changed.discard(key)
            else:
                changed.add(key)
                deleted.discard(key)
        return None, deleted

    def assigned(self, worker_ids: Iterable[object]) -> None:
        """A committed round assigned these entries: no longer available."""
        for key in worker_ids:
            entry = self.entries.get(key)
            if entry is None:
                continue
            entry = {**entry, "available": False}
            entry.pop("outcome", None)  # the assignment cleared it
            self._keep(key, entry)

    def cleared(self, outcomes: Iterable[tuple[object, object]]) -> None:
        """A committed round applied and cleared these outcomes (entry id, outcome token)."""
        for key, token in outcomes:
            entry = self.entries.get(key)
            outcome = entry.get("outcome") if entry is not None else None
            if entry is None or not isinstance(outcome, Mapping) or outcome.get("token") != token:
                continue
            self._keep(key, {k: v for k, v in entry.items() if k != "outcome"})

    def _keep(self, key: object, entry: Document) -> None:
        if in_round(entry):
            self.entries[key] = entry
        else:
            self.entries.pop(key, None)

    async def close(self) -> None:
        if self.stream is not None:
            stream, self.stream = self.stream, None
            await close_quietly(stream)
