"""The start gate of a rate limit on the real server (recruiter.domain.start_gate): concurrent takers
never exceed the gate's starts in any window, and a malformed gate document is repaired full (fail
closed), said, and never stops a taker."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from structlog.testing import capture_logs

from recruiter.domain.start_gate import Gate, gate_id, reply_of
from recruiter.processes.worker.start_gate import NotStarted, StartGate
from recruiter.store import start_gates
from recruiter.store.clock import ServerClock
from tests.processes.test_limits_processes import most_in_a_window

GROUP = "paced"
GATE = Gate(GROUP, None, 3, 300)  # 3 starts in any 300 ms


async def _taken(db_uri: str, gates: list[Gate], takers: int, each: int) -> list[datetime]:
    """``takers`` workers of their own clients, each taking ``each`` tokens as a worker does."""
    clients = [AsyncMongoClient(db_uri, tz_aware=True) for _ in range(takers)]
    stopping = asyncio.Event()
    try:
        async def taker(client: AsyncMongoClient[Any]) -> list[datetime]:
            gate = StartGate(client.get_default_database().start_gates, ServerClock(), stopping)
            times = []
            for n in range(each):
                started = await gate.start({"_id": n, "start_gate": [g.document() for g in gates]})
                assert isinstance(started, datetime), started
                times.append(started)
            return times

        found = await asyncio.gather(*(taker(c) for c in clients))
    finally:
        for c in clients:
            await c.close()
    return sorted(t for times in found for t in times)


def test_concurrent_takers_never_exceed_the_gate_in_any_window(db_uri: str, db: Any) -> None:
    times = asyncio.run(_taken(db_uri, [GATE], takers=6, each=4))
    assert len(times) == 24
    assert most_in_a_window(times, GATE.window_ms / 1000) <= GATE.entries
    # Each token is the server's time of its write, and the log keeps only the last window's (a write
    # the embedded server answered with nothing may have left a token of its own: one more, never fewer).
    stored = db.start_gates.find_one({"_id": gate_id(GROUP)})
    assert times[-1] in stored["s"]
    assert len(stored["s"]) <= GATE.entries
    assert all(t > max(stored["s"]) - GATE.window for t in stored["s"])
    assert stored["last"]["granted"] is True


def test_a_grant_is_never_dated_before_a_start_already_in_the_log(db_uri: str, db: Any) -> None:
    """A write whose server time was read before another's, applied after it, finds a start later
    than its own time in the log (here one 20 s ahead, within the window, so not malformed). Its
    grant is dated at that start, not before it: the log only grows in time, and no later grant's
    trim can drop a start that an earlier-dated grant had to count (CI, under load: 4 starts in
    one 300 ms window of a gate of 3). The gate's window is wide, so that the start is still ahead
    when the write comes on a loaded machine (200 ms ahead was not, once)."""
    gate = Gate(GROUP, None, 3, 60_000)
    ahead = datetime.now(UTC) + timedelta(seconds=20)
    ahead = ahead.replace(microsecond=ahead.microsecond // 1000 * 1000)
    db.start_gates.insert_one({"_id": gate_id(GROUP), "s": [ahead]})

    async def scenario() -> Any:
        async with AsyncMongoClient(db_uri, tz_aware=True) as client:
            return reply_of(await start_gates.take(client.get_default_database().start_gates, [gate], "n1"),
                            [gate], "n1")

    reply = asyncio.run(scenario())
    assert reply is not None
    assert reply.granted
    assert reply.problem is None
    assert reply.at == ahead
    stored = db.start_gates.find_one({"_id": gate_id(GROUP)})
    assert stored["s"] == [ahead, ahead]


def test_a_group_and_a_tenant_gate_hold_together(db_uri: str, db: Any) -> None:
    tenant = Gate(GROUP, "acme", 2, 300)
    times = asyncio.run(_taken(db_uri, [GATE, tenant], takers=4, each=3))
    assert most_in_a_window(times, 0.3) <= 2  # the tighter of the two
    stored = db.start_gates.find_one({"_id": gate_id(GROUP)})
    assert stored["tenants"]["acme"][-1] == stored["s"][-1] == times[-1]  # one time for both logs


@pytest.mark.parametrize(("bad", "problem"), [
    ({"s": "x"}, "s: expected an array of start times"),
    ({"s": [1, 2]}, "s: an entry is not a date"),
    ({"s": [datetime.now(UTC) + timedelta(days=3)]}, "s: a start is dated ahead of the server's clock"),
    ({"s": [], "tenants": "x"}, "tenants: expected an embedded document"),
])
def test_a_malformed_gate_is_repaired_full_and_said(db_uri: str, db: Any, bad: dict[str, Any], problem: str) -> None:
    gates = [GATE] if "tenants" not in bad else [GATE, Gate(GROUP, "acme", 3, 300)]
    db.start_gates.insert_one({"_id": gate_id(GROUP), **bad})

    async def scenario() -> tuple[Any, list[datetime]]:
        async with AsyncMongoClient(db_uri, tz_aware=True) as client:
            metadata = client.get_default_database().start_gates
            reply = reply_of(await start_gates.take(metadata, gates, "n1"), gates, "n1")
            repaired = await metadata.find_one({"_id": gate_id(GROUP)})
            with capture_logs() as logs:
                started = await StartGate(metadata, ServerClock(), asyncio.Event()).start(
                    {"_id": 1, "start_gate": [g.document() for g in gates]})
            return reply, [repaired, started, logs]

    reply, (repaired, started, logs) = asyncio.run(scenario())
    assert reply is not None
    assert not reply.granted
    assert reply.problem is not None
    assert reply.problem.startswith(problem)
    # Repaired full as of the write: the next start comes one window later, never at once.
    full = [reply.at] * GATE.entries
    assert (repaired["tenants"]["acme"] if "tenants" in bad else repaired["s"]) == full
    assert isinstance(started, datetime)
    assert started >= reply.at + GATE.window
    assert not [e for e in logs if e["log_level"] == "error"]


def test_the_worker_says_it_repaired_a_malformed_gate(db_uri: str, db: Any) -> None:
    db.start_gates.insert_one({"_id": gate_id(GROUP), "s": "x"})

    async def scenario() -> list[Any]:
        async with AsyncMongoClient(db_uri, tz_aware=True) as client:
            with capture_logs() as logs:
                await StartGate(client.get_default_database().start_gates, ServerClock(), asyncio.Event()).start(
                    {"_id": 1, "start_gate": [GATE.document()]})
            return logs

    said = [e for e in asyncio.run(scenario()) if e["event"] == "limits.start_gate_repaired"]
    assert len(said) == 1
    assert said[0]["problem"] == "s: expected an array of start times"


def test_a_stop_while_refused_gives_the_job_back_unstarted(db_uri: str, db: Any) -> None:
    long = Gate(GROUP, None, 1, 60_000)

    async def scenario() -> object:
        async with AsyncMongoClient(db_uri, tz_aware=True) as client:
            metadata = client.get_default_database().start_gates
            stopping = asyncio.Event()
            gate = StartGate(metadata, ServerClock(), stopping)
            first = await gate.start({"_id": 1, "start_gate": [long.document()]})
            assert isinstance(first, datetime)
            second = asyncio.ensure_future(gate.start({"_id": 2, "start_gate": [long.document()]}))
            await asyncio.sleep(0.3)
            assert not second.done()  # refused: it waits for the window, holding its job
            stopping.set()
            return await asyncio.wait_for(second, 5)

    assert asyncio.run(scenario()) == NotStarted("the worker is stopping")
    assert len(db.start_gates.find_one({"_id": gate_id(GROUP)})["s"]) == 1


def test_a_malformed_gate_spec_is_not_started(db_uri: str) -> None:
    async def scenario() -> object:
        async with AsyncMongoClient(db_uri, tz_aware=True) as client:
            gate = StartGate(client.get_default_database().start_gates, ServerClock(), asyncio.Event())
            return await gate.start({"_id": 1, "start_gate": [["paced", None, "5", 1000]]})

    said = asyncio.run(scenario())
    assert isinstance(said, NotStarted)
    assert "start_gate" in said.reason
