"""Draining a queue against a test database: enqueue, run to empty, return what was archived.

:func:`drain_async` (and :func:`drain`, for synchronous tests) enqueues the jobs
it is given, then runs a real recruiter and a real worker in the test's own
process (the same code as ``recruiter start`` and ``worker start``, on the
test's database, with short timings) until nothing is left:

- every job it enqueued is archived, even one due later (a delayed job, a
  retry after a wait: those waits are real, so keep them short in tests);
- no job of ``groups`` is due now, and none is assigned to its worker.

It returns the archived documents of the jobs it enqueued, in the order given,
then of the other jobs its worker ran. It raises ``TimeoutError`` (naming what is
left) after ``timeout_s``.

What it does not cover: the cleaner (nothing removes dead workers or prunes
history), crashes (its worker runs in the test's process, which must not die),
and jobs that only another worker may take. The test's modules are importable
by the worker as they are by the test (same process): no allow-list applies.
Another recruiter already leading on that database would be left to lead.

Invariant: the processes it starts are stopped, and their clients closed, before
it returns or raises; logging and the standard streams are as they were.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import structlog

from recruiter.domain.builder import JobBuilder
from recruiter.domain.control import read_switches
from recruiter.domain.naming import ANY_GROUP
from recruiter.domain.workable import Workable
from recruiter.processes.recruiter import RecruiterConfig, RecruiterProcess
from recruiter.processes.worker.runtime import WorkerConfig, WorkerProcess
from recruiter.producer.client import AsyncRecruiter
from recruiter.store import (
    ServerClock,
    async_client,
    async_db,
    ensure_indexes,
    heartbeat_client,
    metadata,
    parse_target,
    scheduled,
)
from recruiter.store import archived as archived_store
from recruiter.store.layout import Collections
from recruiter.testing.capture import installed_for_now

log = structlog.get_logger("recruiter.testing")

DRAIN_WORKER = "drain"
CHECK_EVERY_S = 0.05


@dataclass(frozen=True)
class Drained:
    """What a drain archived: ``jobs`` (the documents of the jobs it was given, in order, then the
    others its worker ran) and ``enqueued`` (the first ones only)."""

    jobs: tuple[dict[str, Any], ...]
    enqueued: tuple[dict[str, Any], ...]

    @property
    def results(self) -> list[object]:
        """``result`` of each enqueued job (None for one that did not end ``done``)."""
        return [doc.get("result") for doc in self.enqueued]

    @property
    def whys(self) -> list[object]:
        """``why`` of each enqueued job."""
        return [doc.get("why") for doc in self.enqueued]


DUE_SLACK = timedelta(seconds=1)


def drain(uri: str, jobs: Iterable[Workable | JobBuilder[Any]] = (), *, groups: Sequence[str] = (ANY_GROUP,),
          concurrency: int = 1, timeout_s: float = 60.0, max_crashes: int = 3) -> Drained:
    """:func:`drain_async` for synchronous tests (not from inside a running event loop)."""
    return asyncio.run(drain_async(uri, jobs, groups=groups, concurrency=concurrency, timeout_s=timeout_s,
                                   max_crashes=max_crashes))


async def drain_async(uri: str, jobs: Iterable[Workable | JobBuilder[Any]] = (), *,
                      groups: Sequence[str] = (ANY_GROUP,), concurrency: int = 1, timeout_s: float = 60.0,
                      max_crashes: int = 3) -> Drained:
    """Enqueue ``jobs`` on the database of ``uri``, run a recruiter and a worker of ``groups`` with
    ``concurrency`` slots until nothing is left, and return what they archived (see the module)."""
    target = parse_target(uri)
    client = async_client(target, app_name="recruiter-testing")
    beats = heartbeat_client(target, app_name="recruiter-testing-heartbeat")
    try:
        db = async_db(client, target)
        await ensure_indexes(db)
        clock = ServerClock()
        await clock.calibrate(client)
        producer = AsyncRecruiter(client, target.database, clock=clock, prefix=target.prefix)
        ids = [*await producer.enqueue_many(jobs)]
        recruiter = RecruiterProcess(db, clock, RecruiterConfig(backoff_from_s=0.01, backoff_to_s=0.1))
        worker = WorkerProcess(db, clock, WorkerConfig(
            groups=tuple(groups), concurrency=concurrency, worker_id=f"{DRAIN_WORKER}-{ids[0] if ids else 'any'}",
            heartbeat_interval_s=1.0, poll_from_s=0.01, poll_to_s=0.1, max_crashes=max_crashes,
            deregister_wait_s=5.0), heartbeat_db=beats[target.database], exit_now=_cannot_exit)
        with installed_for_now():
            await _run_until_empty(recruiter, worker, ids, timeout_s)
        found = {d["_id"]: d for d in await archived_store.read_ran(
            Collections.of(db).archived, ids, [s.id for s in worker.slots])}
    finally:
        beats.close()
        await client.close()
    enqueued = tuple(found.pop(i) for i in ids)
    others = sorted(found.values(), key=lambda d: str(d.get("archived_at")))
    return Drained(jobs=(*enqueued, *others), enqueued=enqueued)


def _cannot_exit(status: int) -> None:
    # Only a forced stop or a worker declared dead asks this; a drain does neither.
    log.error("drain.worker_exit_asked", status=status)


async def _run_until_empty(recruiter: RecruiterProcess, worker: WorkerProcess, ids: list[Any],
                           timeout_s: float) -> None:
    leading = asyncio.create_task(recruiter.run(), name="drain.recruiter")
    working = asyncio.create_task(worker.run(), name="drain.worker")
    tasks = [leading, working]
    try:
        async with asyncio.timeout(timeout_s):
            while not await _empty(worker, ids):
                for task in tasks:
                    if task.done():
                        task.result()  # raises what stopped it
                        raise RuntimeError(f"the {task.get_name()} task stopped early")
                await asyncio.sleep(CHECK_EVERY_S)
    except TimeoutError:
        left = set(ids) - await archived_store.read_ids(worker.c.archived, ids)
        raise TimeoutError(f"drain: still not archived after {timeout_s:g}s: {sorted(map(str, left))} "
                           "(or jobs of its groups still due)") from None
    finally:
        # The worker first, while the recruiter still runs: a job handed out just before the stop
        # still runs, and the worker leaves the roster once the recruiter has applied its outcome.
        # Stopped together, that outcome stayed in the entry, and the next drain's worker (the same
        # id, in this same process) was refused the id as in use.
        worker.stop()
        with contextlib.suppress(Exception):  # what stopped a task was raised above, if anything
            await asyncio.wait_for(asyncio.gather(working, return_exceptions=True), timeout=30)
        recruiter.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=30)


async def _empty(worker: WorkerProcess, ids: list[Any]) -> bool:
    """Every given job archived, no slot busy, and nothing due for the worker's groups."""
    if worker.busy() or len(await archived_store.read_ids(worker.c.archived, ids)) < len(ids):
        return False
    groups = None if ANY_GROUP in worker.config.groups else list(worker.config.groups)
    paused = read_switches(await metadata.read_switches(worker.c.metadata), None, None)
    # Due within DUE_SLACK counts as due: another process's clock (the producer that enqueued
    # them, calibrated on its own) may be ahead of this one by its calibration error.
    return not await scheduled.work_left_for(worker.c.scheduled, groups, [s.id for s in worker.slots],
                                             worker.clock.now() + DUE_SLACK, paused.groups, paused.tenants)
