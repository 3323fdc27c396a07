"""The leader's sweep of held jobs over a wide fan-in (issue 42: no re-scan of the siblings):
each look reads a bounded front of a held job's ``pending``, and still resolves it in the end."""

from __future__ import annotations

import asyncio

from recruiter.domain.dependencies import HELD_UNTIL
from recruiter.domain.flows import fan_in
from recruiter.processes.dependencies import DependencySweep
from recruiter.store.dependencies import release_dependents
from tests.flow_workables import Part
from tests.integration.test_processes_inproc import START, Harness, run

PARTS = 30
PER_JOB = 10


def _largest_id_read(h: Harness) -> int:
    """The most ids one read of ``scheduled`` by ``_id`` asked for (the sweep's read of what ended)."""
    sizes = [len(c["filter"]["_id"]["$in"]) for c in h.commands.named("find", "scheduled")
             if isinstance(c.get("filter", {}).get("_id"), dict) and "$in" in c["filter"]["_id"]]
    return max(sizes, default=0)


def test_the_sweep_reads_a_bounded_front_of_a_wide_fan_in_and_still_releases_it(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        rec = h.recruiter
        rec.dependencies = DependencySweep(per_job=PER_JOB, per_look=1_000)
        *parts, final = await h.producer.enqueue_many(
            fan_in(h.producer, [Part(n).as_job_of(h.producer).schedule_in(hours=1) for n in range(PARTS)], Part(-1)))
        # Every part archived by a process that releases nothing (an operator's move, a 0.1.1 leader):
        # only the sweep can pull them from the fan-in's pending.
        for part in parts:
            doc = await h.job(part)
            assert doc is not None
            await h.db.archived.insert_one({**doc, "why": "done", "archived_at": START})
            await h.db.scheduled.delete_one({"_id": part})
        assert await rec.lease.acquire()
        left = PARTS
        while left:
            h.commands.clear()
            assert await rec.dependencies.look(rec.leadership, rec.c, h.clock.now()) == 1
            assert _largest_id_read(h) <= PER_JOB  # the front of pending, not every sibling
            held = await h.job(final)
            assert held is not None
            left -= PER_JOB
            assert len(held["after"]["pending"]) == left
            assert held["scheduled_at"] == (HELD_UNTIL if left else START)

    run(db_uri, scenario)


def test_the_last_two_parts_ending_at_once_decide_each_dependent_once(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        rec = h.recruiter
        *parts, runs = await h.producer.enqueue_many(fan_in(h.producer, [Part(1), Part(2)], Part(0), if_failed="run"))
        cancelled = await Part(3).as_job_of(h.producer).after(*parts).enqueue()
        ended = dict(zip(parts, ("done", "cancelled"), strict=True))
        for part, why in ended.items():  # archived by hand: nothing released yet
            doc = await h.job(part)
            assert doc is not None
            await h.db.archived.insert_one({**doc, "why": why, "archived_at": START})
            await h.db.scheduled.delete_one({"_id": part})
        # The two parts' ends applied at once, each by its own caller, twice, then the sweep looks.
        for _ in range(2):
            await asyncio.gather(*(release_dependents(rec.c, {p: w}, START) for p, w in ended.items()))
        assert await rec.lease.acquire()
        assert await rec.dependencies.look(rec.leadership, rec.c, h.clock.now()) == 0  # nothing left held

        doc = await h.job(runs)
        assert doc is not None
        assert doc["scheduled_at"] == START
        assert "held" not in doc["after"]
        assert doc["after"]["pending"] == []
        assert doc["after"]["failed"] == [{"id": parts[1], "why": "cancelled"}]  # recorded once
        assert await h.job(cancelled) is None
        assert await h.db.archived.count_documents({"_id": cancelled, "why": "upstream-failed"}) == 1

    run(db_uri, scenario)
