"""The leader's sweep of held jobs over a wide fan-in (issue 42: no re-scan of the siblings):
each look reads a bounded front of a held job's ``pending``, and still resolves it in the end."""

from __future__ import annotations

from recruiter.domain.dependencies import HELD_UNTIL
from recruiter.domain.flows import fan_in
from recruiter.processes.dependencies import DependencySweep
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
