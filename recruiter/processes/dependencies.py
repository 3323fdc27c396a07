"""The leader's part in jobs that wait for other jobs (:mod:`recruiter.domain.dependencies`).

Two ways a held job is released, so none waits for ever:

- **At once:** the round that archives jobs (:mod:`recruiter.processes.applying`) pulls them
  from their dependents in the same fenced transaction (:func:`after_archive`).
- **The sweep** (:class:`DependencySweep`): every ``interval_s``, the leader reads up to
  ``limit`` held jobs (the ``waiting_for`` index, by ``_id`` from where the last look ended),
  reads which of the jobs they wait for have ended (archived, or gone), and resolves them in
  a fenced transaction. It catches what an older release archived, what a crash left between
  an archive and its release, a dependency pruned from ``archived`` (gone: counted once two
  looks found it so), and a job enqueued just as its dependency ended. Every other way a job
  ends resolves its dependents itself (a cancel, a delete, a quarantine, the cleaner).

  A look reads at most ``per_job`` ids from the front of each held job's ``pending``, and at most
  ``per_look`` in all (the jobs past that budget wait for the next look): a fan-in of 10 000 parts
  would otherwise have every look read whether each of its 10 000 parts has ended (a re-scan of
  the siblings every ``interval_s``, seconds of reads on the embedded server that starved the
  rounds). What a look does not read, a later one does: once the front has ended it is pulled
  from ``pending`` (by a round or by this sweep), so each look moves on by ``per_job`` at least.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import datetime

import structlog

from recruiter.domain.dependencies import GONE
from recruiter.domain.edges import is_counted
from recruiter.domain.events import Event, JobArchived
from recruiter.domain.outcome import MALFORMED
from recruiter.domain.workflow import workflow_name
from recruiter.processes.leadership import Leadership, LostLease
from recruiter.store.connection import StoreError, first_line
from recruiter.store.dependencies import archive_held, read_ended, read_held, release_dependents, resolve
from recruiter.store.edges import front
from recruiter.store.layout import Collections, Document

log = structlog.get_logger("recruiter.dependencies")

SWEEP_INTERVAL_S = 2.0
SWEEP_LIMIT = 200
MAX_SUSPECTS = 10_000  # ids suspected gone kept between looks (beyond: only the last look's)
# Ids of ``pending`` a look reads per held job (its front), and in all (see the module).
PENDING_PER_JOB = 100
PENDING_PER_LOOK = 2_000


def decided_event(d: Document, by: str) -> JobArchived:
    """The event of a dependent archived because of what it waited for (``upstream-failed``,
    ``skipped``, malformed), as :func:`recruiter.store.dependencies.resolve` reports it: counted
    by the metrics like any archived job (per group, and per workflow for a step)."""
    return JobArchived(d["_id"], str(d["why"]), d.get("attempts"), group_of(d), by=by,
                       reason=d.get("reason") if isinstance(d.get("reason"), str) else None,
                       workflow=workflow_name(d.get("workflow")))


def group_of(d: Document) -> str | None:
    group = d.get("group")
    return group if isinstance(group, str) else None


async def after_archive(c: Collections, archived: list[Document], now: datetime,
                        emit: Callable[[Event], None] | None = None) -> None:
    """Release the dependents of the jobs a round archived (in the round's transaction); those
    archived in turn are emitted (``emit``: after the round commits) or else logged."""
    ended = {d["_id"]: d.get("why") for d in archived}
    if ended:
        reported(await release_dependents(c, ended, now), emit)


def reported(decided: list[Document], emit: Callable[[Event], None] | None) -> None:
    """Each dependent the leader archived, as an event (``emit``) or else a log line."""
    for d in decided:
        if emit is not None:
            emit(decided_event(d, "recruiter"))
        else:
            log.info("job.archived", job_id=str(d["_id"]), why=d["why"], by="dependencies")


class DependencySweep:
    """The leader's periodic look at held jobs (see the module)."""

    def __init__(self, interval_s: float = SWEEP_INTERVAL_S, limit: int = SWEEP_LIMIT,
                 per_job: int = PENDING_PER_JOB, per_look: int = PENDING_PER_LOOK,
                 emit: Callable[[Event], None] | None = None) -> None:
        self.per_job, self.per_look = per_job, per_look
        self.emit = emit  # the dependents a look archived, once its transaction committed
        self.interval_s, self.limit = interval_s, limit
        self.due = 0.0
        self.cursor: object = None  # the last _id looked at; None: from the start
        # Whether any job may be held: False once a look from the start found none, so that the
        # rounds skip looking for dependents (one read each) until a look finds one again.
        self.any_held = True
        # Jobs found neither queued nor archived, by id: counted as gone only when a later look
        # finds them gone still. The cleaner deletes a job it archives just before writing its
        # archived copy; a look in between must not take it for gone (a policy may treat gone
        # otherwise than how it ended).
        self.suspects: set[object] = set()

    async def maybe(self, leadership: Leadership, c: Collections, now: datetime) -> int:
        """Look if due; how many held jobs were resolved. A store error is logged, not raised."""
        loop = asyncio.get_running_loop()
        if loop.time() < self.due:
            return 0
        self.due = loop.time() + self.interval_s
        try:
            return await self.look(leadership, c, now)
        except LostLease:
            raise
        except StoreError as exc:
            log.warning("dependencies.sweep_failed", error=first_line(exc))
        except Exception as exc:  # noqa: BLE001 - a held job's data must not stop the rounds
            log.warning("dependencies.sweep_failed", error=f"{type(exc).__name__}: {str(exc)[:200]}")
        return 0

    async def look(self, leadership: Leadership, c: Collections, now: datetime) -> int:
        started_from = self.cursor
        held = await read_held(c, self.cursor, self.limit)
        if held or started_from is None:
            self.any_held = bool(held)
        taken = self._within_budget(held)
        self.cursor = taken[-1]["_id"] if len(taken) < len(held) or len(held) >= self.limit else None
        waits, broken = await _fronts(c, taken, self.per_job)
        pending = {i for w in waits.values() for i in w}
        ended = self._confirmed(await read_ended(c, list(pending)) if pending else {})
        ready = [d for d in taken if d["_id"] in broken or not waits[d["_id"]]
                 or any(i in ended for i in waits[d["_id"]])]
        if not ready:
            return 0
        async with leadership.fenced() as inside:
            decided = await _resolve_all(inside, ready, waits, broken, ended, now)
        reported(decided, self.emit)
        return len(ready)

    def _within_budget(self, held: list[Document]) -> list[Document]:
        """The first of ``held`` whose fronts of ``pending`` fit ``per_look`` ids (one at least)."""
        budget, taken = self.per_look, list[Document]()
        for d in held:
            need = min(_left(d), self.per_job)
            if taken and need > budget:
                break
            taken.append(d)
            budget -= need
        return taken

    def _confirmed(self, ended: dict[object, object]) -> dict[object, object]:
        """``ended`` without the gone ones this look sees gone for the first time."""
        gone = {i for i, why in ended.items() if why == GONE}
        fresh = gone - self.suspects
        self.suspects = (self.suspects | gone) if len(self.suspects) < MAX_SUSPECTS else gone
        return {i: why for i, why in ended.items() if i not in fresh}


def _pending(doc: Document) -> list[object]:
    """What ``doc`` waits for, without its guard (its own id: recruiter.domain.dependency_policy)."""
    after = doc.get("after")
    pending = after.get("pending") if isinstance(after, dict) else None
    return [i for i in pending if i != doc["_id"]] if isinstance(pending, list) else []


def _left(doc: Document) -> int:
    """How many jobs ``doc`` may still wait for (its ``after.left`` when stored with edges)."""
    after = doc.get("after")
    left = after.get("left") if is_counted(after) and isinstance(after, dict) else None
    return left if isinstance(left, int) and left >= 0 else len(_pending(doc))


async def _fronts(c: Collections, held: list[Document], per_job: int
                  ) -> tuple[dict[object, list[object]], dict[object, str]]:
    """The front of what each held job waits for (``per_job`` ids: of ``pending``, or of its edges
    left when stored with edges), and the jobs whose edges are malformed, with the reason."""
    waits: dict[object, list[object]] = {}
    broken: dict[object, str] = {}
    for d in held:
        if not is_counted(d.get("after")):
            waits[d["_id"]] = _pending(d)[:per_job]
            continue
        ups, problem = await front(c, d["_id"], per_job)
        waits[d["_id"]] = list(ups)
        if problem is not None:
            broken[d["_id"]] = problem
    return waits, broken


async def _resolve_all(c: Collections, ready: list[Document], waits: Mapping[object, list[object]],
                       broken: Mapping[object, str], ended: Mapping[object, object], now: datetime) -> list[Document]:
    """Decide ``ready``; the dependents archived (the cascades included)."""
    decided: list[Document] = []
    mine = {i: ended[i] for d in ready for i in waits[d["_id"]] if i in ended}
    if mine:
        decided += await release_dependents(c, mine, now)
    for d in ready:
        if d["_id"] in broken:  # a malformed edge: never released, archived with the reason
            done = await archive_held(c, d, MALFORMED, broken[d["_id"]], now)
        elif not waits[d["_id"]]:  # waits for nothing (or malformed): decide it as it is
            whole = await c.scheduled.find_one({"_id": d["_id"], "after.held": True})
            done = await resolve(c, whole, now) if whole is not None else None
        else:
            continue
        if done is not None:
            decided.append(done)
            decided += await release_dependents(c, {done["_id"]: done["why"]}, now)
    return decided
