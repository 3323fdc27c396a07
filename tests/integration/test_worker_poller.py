"""Workers poll their own entries (issue 40): one read per process for all its slots, a pace that
backs off while idle and is fast while an entry is hot, and the leader's hot entries."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from recruiter.domain.hot import HOT_FOR, HOT_POLL_S
from recruiter.processes.recruiter import RecruiterConfig
from recruiter.processes.worker.poller import Poller
from recruiter.processes.worker.runtime import WorkerConfig, WorkerProcess
from tests.integration.test_processes_inproc import START, Harness, eventually, run
from tests.workables import Record, WaitForRelease, release

POLL_FROM_S = 0.01
POLL_TO_S = 0.16


def _roster_finds(h: Harness) -> list[dict[str, Any]]:
    return h.commands.named("find", "roster")


def _ids_read(find: dict[str, Any]) -> object:
    return find["filter"].get("_id")


async def _started(process: WorkerProcess) -> bool:
    """Every slot made its first read and waits, and the poller runs."""
    return process.poller is not None and all(not s.inbox.must_poll and s.inbox.waiting for s in process.slots)


def test_one_read_serves_every_slot_of_a_process_and_an_idle_process_backs_off_to_poll_to(db_uri: str) -> None:
    """A process of 4 slots reads its entries with one ``find`` for all of them, never one per
    slot; idle, its reads come at most every ``poll_to``; the jobs then handed to its slots reach
    them through that read (no slot reads its entry, none reads its job)."""
    async def scenario(h: Harness) -> None:
        config = WorkerConfig(worker_id="w", concurrency=4, poll_from_s=POLL_FROM_S, poll_to_s=POLL_TO_S,
                              heartbeat_interval_s=3600, deregister_wait_s=0.2)
        process = WorkerProcess(h.db, h.clock, config, heartbeat_db=h.sync_db)
        running = asyncio.create_task(process.run())
        ids = [s.id for s in process.slots]
        try:
            await eventually(lambda: _started(process), message="the slots waiting")
            poller = process.poller
            assert poller is not None

            async def backed_off() -> bool:
                return poller.pace.wait_s == POLL_TO_S

            await eventually(backed_off, message="the poller backed off")
            h.commands.clear()
            loop = asyncio.get_running_loop()
            first, began = poller.reads, loop.time()

            async def five_more() -> bool:
                return poller.reads >= first + 5

            await eventually(five_more, timeout_s=30, message="five idle reads")
            took = loop.time() - began
            finds = _roster_finds(h)
            assert finds
            assert all(_ids_read(f) == {"$in": ids} for f in finds), finds
            # Five reads took at least four waits of poll_to (the machine's load only makes them longer).
            assert took >= 4 * POLL_TO_S * 0.95, took

            h.commands.clear()
            jobs = [await Record(h.db_uri, n=i).as_job_of(h.producer).enqueue() for i in range(4)]
            assert (await h.round()).assigned == 4

            async def all_recorded() -> bool:
                entries = await h.db.roster.find({"_id": {"$in": ids}, "outcome": {"$exists": True}}).to_list()
                return len(entries) == 4

            await eventually(all_recorded, message="four outcomes")
            assert [f for f in _roster_finds(h) if _ids_read(f) in ids] == []  # no slot read its own entry
            assert [f for f in h.commands.named("find", "scheduled") if _ids_read(f) in jobs] == []
        finally:
            process.stop()
            await asyncio.wait_for(running, timeout=30)

    run(db_uri, scenario)


def test_a_process_whose_entry_is_hot_polls_every_hot_poll_s(db_uri: str) -> None:
    """Backed off to ``poll_to`` (here 2 s), a process whose entry the leader marks hot reads every
    ``HOT_POLL_S`` while it is hot: ten reads in far less than one slow wait."""
    async def scenario(h: Harness) -> None:
        config = WorkerConfig(worker_id="w", poll_from_s=POLL_FROM_S, poll_to_s=2.0,
                              heartbeat_interval_s=3600, deregister_wait_s=0.2)
        process = WorkerProcess(h.db, h.clock, config, heartbeat_db=h.sync_db)
        running = asyncio.create_task(process.run())
        try:
            await eventually(lambda: _started(process), message="the slot waiting")
            poller = process.poller
            assert poller is not None

            async def backed_off() -> bool:
                return poller.pace.wait_s >= 1.0

            await eventually(backed_off, timeout_s=30, message="the poller backed off")
            await h.db.roster.update_one({"_id": "w"}, {"$set": {"hot": h.clock.now() + HOT_FOR}})

            async def hot() -> bool:
                return poller.hot

            await eventually(hot, timeout_s=10, message="the poller seeing its entry hot")
            assert poller.pace.wait_s == max(POLL_FROM_S, HOT_POLL_S)
            loop = asyncio.get_running_loop()
            first, began = poller.reads, loop.time()

            async def ten_more() -> bool:
                return poller.reads >= first + 10

            await eventually(ten_more, timeout_s=10, message="ten fast reads")
            assert loop.time() - began < 2.0
            # The mark past (or malformed), it backs off again.
            await h.db.roster.update_one({"_id": "w"}, {"$set": {"hot": "soon"}})

            async def cold() -> bool:
                return not poller.hot and poller.pace.wait_s >= 1.0

            await eventually(cold, timeout_s=30, message="the poller backing off again")
        finally:
            process.stop()
            await asyncio.wait_for(running, timeout=30)

    run(db_uri, scenario)


def test_a_hot_entry_of_a_slot_running_a_job_does_not_keep_its_process_polling_fast(db_uri: str) -> None:
    """A slot's own entry, free and marked hot, while the slot runs a job held ahead in its other
    lane: the slot is handed nothing before that job's outcome, so the mark does not keep the
    process polling fast (it backs off to ``poll_to``). Once the slot is idle, the mark counts again.
    Before, a worker of short jobs in batches read its entries after nearly every job for its mark."""
    async def scenario(h: Harness) -> None:
        first = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()  # FIFO: lane 0
        await WaitForRelease(h.db_uri, "ahead").as_job_of(h.producer).enqueue()  # lane ~1, ahead
        config = WorkerConfig(worker_id="w", prefetch=1, poll_from_s=POLL_FROM_S, poll_to_s=1.0,
                              heartbeat_interval_s=3600, deregister_wait_s=0.2)
        process = WorkerProcess(h.db, h.clock, config, heartbeat_db=h.sync_db)
        running = asyncio.create_task(process.run())
        try:
            await eventually(lambda: _started(process), message="the lanes waiting")
            poller = process.poller
            assert poller is not None
            assert (await h.round()).assigned == 2
            await eventually(lambda: h.ledger(event="start", key="ahead"), message="the job held ahead started")

            async def first_recorded() -> bool:
                entry = await h.roster("w") or {}
                return entry.get("available") is True and (entry.get("outcome") or {}).get("job") == first

            await eventually(first_recorded, message="the first job's outcome, its entry free")
            await h.db.roster.update_one({"_id": "w"}, {"$set": {"hot": h.clock.now() + HOT_FOR}})
            reads = poller.reads

            async def backed_off() -> bool:
                return poller.reads > reads and not poller.hot and poller.pace.wait_s >= 1.0

            await eventually(backed_off, timeout_s=20, message="the poller backing off despite the mark")
            release(h.db_uri, "ahead")

            async def hot_again() -> bool:
                return poller.hot

            await eventually(hot_again, timeout_s=20, message="the mark counting once the slot is idle")
        finally:
            release(h.db_uri, "ahead")
            process.stop()
            await asyncio.wait_for(running, timeout=30)

    run(db_uri, scenario)


def test_the_leader_keeps_idle_entries_hot_prefers_them_and_writes_only_what_changes(db_uri: str) -> None:
    """Two idle entries per group are kept hot; a round whose hot set is the same writes no mark; a
    job goes to a hot entry before an entry that came first by age and id; the assignment removes
    that entry's mark and the round marks another; a mark is renewed before it runs out."""
    async def scenario(h: Harness) -> None:
        workers = [(await h.worker(worker_id, "*"))[0] for worker_id in ("w1", "w2", "w3", "w4")]
        # A previous leader's marks, on the last two entries by id.
        until = START + timedelta(seconds=20)
        await h.db.roster.update_many({"_id": {"$in": ["w3", "w4"]}}, {"$set": {"hot": until}})

        def mark_writes() -> list[dict[str, Any]]:
            return [u for u in h.commands.updates("roster") if isinstance(u["u"], dict) and "hot" in u["u"].get(
                "$set", {})]

        async def hot_ids() -> set[str]:
            return {e["_id"] for e in await h.db.roster.find({"hot": {"$exists": True}}).to_list()}

        h.commands.clear()
        assert (await h.round()).assigned == 0
        assert mark_writes() == []  # the marks read are kept, not written again
        assert await hot_ids() == {"w3", "w4"}

        job = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        h.commands.clear()
        assert (await h.round()).assigned == 1
        holder = (await h.db.scheduled.find_one({"_id": job}) or {}).get("locked_by")
        assert holder == "w3"  # hot, where age and id alone would pick w1
        assert "hot" not in (await h.roster("w3") or {})
        assert len(mark_writes()) == 1
        assert await hot_ids() == {"w4", "w1"}

        h.commands.clear()
        assert (await h.round()).assigned == 0
        assert mark_writes() == []

        h.clock.advance(timedelta(seconds=12))  # w4's mark has 8 s left: renewed
        for process in workers:
            await process.heartbeat()
        h.commands.clear()
        await h.round()
        writes = mark_writes()
        assert [w["q"]["_id"] for w in writes] == [{"$in": ["w4"]}]
        assert (await h.roster("w4") or {})["hot"] == h.clock.now() + HOT_FOR

    run(db_uri, scenario)


def test_a_round_that_gave_work_to_every_entry_it_offered_keeps_no_entry_hot(db_uri: str) -> None:
    """Hot marks are kept only in a group the round ran dry. A round held to ``--round-size``
    that gave a job to each entry it offered leaves others idle, but not for want of work: it
    marks none of them, and takes back the marks it made before, so no process polls fast for
    work the next rounds hand out anyway. Once a round offers an entry work and finds none, the
    idle entries are hot again."""
    async def scenario(h: Harness) -> None:
        for worker_id in ("w1", "w2", "w3", "w4"):
            await h.worker(worker_id, "*")

        async def hot_ids() -> set[str]:
            return {e["_id"] for e in await h.db.roster.find({"hot": {"$exists": True}}).to_list()}

        assert (await h.round()).assigned == 0
        assert await hot_ids() == {"w1", "w2"}
        h.recruiter.config = RecruiterConfig(round_size=1)
        for n in range(2):
            await Record(h.db_uri, n=n).as_job_of(h.producer).enqueue()
        h.commands.clear()
        assert (await h.round()).assigned == 1  # to w1, hot: w2 stays idle, with a job waiting
        assert await hot_ids() == set()
        unmarks = [u for u in h.commands.updates("roster") if isinstance(u["u"], dict) and "$unset" in u["u"]
                   and "hot" in u["u"]["$unset"]]
        assert [u["q"]["_id"] for u in unmarks] == [{"$in": ["w2"]}]
        assert (await h.round()).assigned == 1  # the second job: still no hot entry
        assert await hot_ids() == set()
        assert (await h.round()).assigned == 0  # nothing for the entry it offered work: dry
        assert len(await hot_ids()) == 2

    run(db_uri, scenario)


def test_a_process_names_all_its_slots_in_its_heartbeat_in_one_write(db_uri: str) -> None:
    """The leader gives an entry work only once its process's heartbeat names it: the slots of a
    process are named together (one write for its 4 slots and their lanes), so no round sees one
    slot alone and hands it, ahead, the jobs meant for the others."""
    async def scenario(h: Harness) -> None:
        config = WorkerConfig(worker_id="w", concurrency=4, prefetch=1, poll_from_s=POLL_FROM_S,
                              poll_to_s=POLL_TO_S, heartbeat_interval_s=3600, deregister_wait_s=0.2)
        process = WorkerProcess(h.db, h.clock, config, heartbeat_db=h.sync_db)
        h.commands.clear()
        running = asyncio.create_task(process.run())
        try:
            await eventually(lambda: _started(process), message="the slots waiting")
            ids = sorted(s.id for s in process.slots)
            assert len(ids) == 8  # 4 slots, each with its look-ahead lane
            namings = [u for u in h.commands.updates("heartbeats") if isinstance(u["u"], dict)
                       and "$addToSet" in u["u"]]
            assert len(namings) == 1
            assert sorted(namings[0]["u"]["$addToSet"]["ids"]["$each"]) == ids
            beat = await h.db.heartbeats.find_one({"ids": {"$exists": True}})
            assert beat is not None
            assert sorted(beat["ids"]) == ids
            sessions = {s.id: s.session for s in process.slots}
            assert {v["id"]: v["session"] for v in beat["slots"].values()} == sessions
        finally:
            process.stop()
            await asyncio.wait_for(running, timeout=30)

    run(db_uri, scenario)


def test_a_read_that_still_shows_the_job_a_slot_ran_makes_it_read_nothing(db_uri: str) -> None:
    """A poll that left before the slot recorded its job comes back showing that job still assigned.
    It is nothing new: the slot neither runs it again nor reads its own entry (it was handed on as
    an event without a job, and the slot read its entry: CI, 2026-11-29, under load)."""
    async def scenario(h: Harness) -> None:
        job_id = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        process = h.process("w")
        (slot,) = process.slots
        await process.register(slot)
        assert (await h.round()).assigned == 1
        token = (await h.job(job_id) or {})["lock_token"]
        # The slot ran that job (its lock token) and waits again; the read shows the entry as it was.
        slot.inbox.last_token, slot.inbox.must_poll, slot.inbox.waiting = token, False, True
        poller = Poller(h.db.roster, process.slots, process.inboxes, h.clock, poll_from_s=POLL_FROM_S,
                        poll_to_s=POLL_TO_S)
        assert await poller.read_once() == 0
        assert (slot.inbox.delivered, slot.inbox.must_poll) == (None, False)

    run(db_uri, scenario)
