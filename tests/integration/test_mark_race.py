"""A take-back that reads a silent entry, then deletes it, decides from what it read: whether the
job held ahead had started (its ``started`` mark). The worker may write the mark, and start the
job, in between. The delete is fenced on the mark as read, so the job is never given back as
provably unstarted after it ran (chaos on CI, 2026-11-29: a job that ends its process ran once
more than its attempts and returns allowed)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from recruiter.domain.liveness import expand_beats
from recruiter.processes.upkeep import find_stranded, take_back
from recruiter.processes.worker.runtime import WorkerConfig
from recruiter.store import roster
from recruiter.store.layout import Collections
from tests.integration.test_processes_inproc import Harness, run
from tests.workables import Record


def test_a_mark_written_after_the_take_back_read_keeps_the_entry_and_the_job(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        first = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()  # lane 0, depth 0
        second = await Record(h.db_uri, n=2).as_job_of(h.producer).enqueue()  # lane ~1, ahead
        process = h.process("w", prefetch=1)
        lane0, lane1 = process.slots
        for slot in process.slots:
            await process.register(slot)
        assert (await h.round()).assigned == 2
        held: dict[str, Any] = {}
        for slot in process.slots:
            held[slot.id] = await process.slot_loop.fetch(slot)
        assert (held[lane0.id][0], held[lane1.id][0], held[lane1.id][2]) == (first, second, True)

        c = Collections.of(h.db)
        h.clock.advance(timedelta(seconds=3 * WorkerConfig().heartbeat_interval_s))  # silent: stranded
        stranded = await find_stranded(c, expand_beats(await h.db.heartbeats.find().to_list()))
        assert {s.job["_id"] for s in stranded} == {first, second}

        token = (await h.job(second))["lock_token"]
        assert await roster.mark_started(c.roster, lane1.id, lane1.session, second, token)  # then it starts

        done = await take_back(c, stranded, h.clock.now())
        assert {s.job["_id"]: kind for s, kind in done} == {first: "returned"}
        assert await h.roster(lane1.id) is not None, "the entry that marked its job started stays"
        job = await h.job(second)
        assert job is not None
        assert (job["locked"], job["attempts"]) == (True, 1), "the job that may run is not given back"

        # The next pass judges it from the mark: it may have started, so its return is unproven.
        again = await find_stranded(c, expand_beats(await h.db.heartbeats.find().to_list()))
        kinds = {s.job["_id"]: kind for s, kind in await take_back(c, again, h.clock.now())}
        assert kinds[second] == "returned"
        job = await h.job(second)
        assert job is not None
        assert (job["locked"], job["attempts"], job["unproven_returns"]) == (False, 0, 1)
        assert "proven" not in job["last_return"]

    run(db_uri, scenario)
