"""The leadership shared by the recruiter and the cleaner (recruiter.processes.leadership), on the real server."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from pymongo.errors import OperationFailure

from recruiter.processes.cleaner import CleanerConfig, CleanerProcess
from recruiter.processes.leadership import Leadership, LostLease, Pace
from recruiter.processes.recruiter import RecruiterConfig, RecruiterProcess
from tests.integration.test_processes_inproc import Harness, run


async def lease_owner(h: Harness, role: str) -> object:
    doc = await h.db.metadata.find_one({"_id": role})
    return None if doc is None else doc.get("owner")


async def until(condition: Callable[[], Awaitable[bool]], timeout_s: float = 10.0) -> None:
    """Poll ``condition`` every 10 ms; fail after ``timeout_s``."""
    for _ in range(int(timeout_s / 0.01)):
        if await condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not true within {timeout_s}s")


async def lead_then_stop(h: Harness, process: CleanerProcess | RecruiterProcess, role: str) -> None:
    assert process.exit_code == 0
    assert not process.busy()
    task = asyncio.create_task(process.run())

    async def leading() -> bool:
        return await lease_owner(h, role) == process.owner and process.lease.held

    await until(leading)
    process.stop()
    await asyncio.wait_for(task, timeout=10)
    assert not process.lease.held
    doc = await h.db.metadata.find_one({"_id": role})
    assert doc is not None
    assert doc["expires_at"] <= h.clock.now()


def test_both_leaders_take_their_lease_stop_on_request_and_release_it(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        await lead_then_stop(h, CleanerProcess(h.db, h.clock, CleanerConfig(interval_s=0.05), owner="c"), "cleaner")
        await lead_then_stop(h, RecruiterProcess(h.db, h.clock, RecruiterConfig(), owner="r"), "recruiter")

    run(db_uri, scenario)


def test_force_cancels_the_task_running_the_process(db_uri: str) -> None:
    """What the CLI's second signal did to a process without force(): cancel its main task."""

    async def scenario(h: Harness) -> None:
        recruiter = RecruiterProcess(h.db, h.clock, RecruiterConfig(), owner="forced")
        task = asyncio.create_task(recruiter.run())

        async def leading() -> bool:
            return recruiter.lease.held

        await until(leading)
        recruiter.force()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=10)

    run(db_uri, scenario)


def test_a_unit_that_fails_is_retried_and_a_lost_lease_ends_the_leadership(db_uri: str) -> None:
    """One error policy for both roles: a database error is survived and the unit runs again."""

    async def scenario(h: Harness) -> None:
        leadership = Leadership(h.db, "test-role", "me", h.clock, ttl_s=10.0)
        assert await leadership.lease.acquire()
        calls: list[int] = []

        async def unit() -> bool:
            calls.append(1)
            if len(calls) == 1:
                raise OperationFailure("refused")  # a failure: retried after backoff_to_s
            if len(calls) == 3:
                leadership.stop()
            return True

        await asyncio.wait_for(leadership.units(unit, Pace(0.01, 0.02), name="unit"), timeout=10)
        assert len(calls) == 3  # the failed one, then two that ran until asked to stop

        await leadership.lease.release()
        leadership.stopping.clear()
        with pytest.raises(LostLease):
            await leadership.units(unit, Pace(0.01, 0.02), name="unit")  # the lease is gone: no unit runs
        assert len(calls) == 3

    run(db_uri, scenario)
