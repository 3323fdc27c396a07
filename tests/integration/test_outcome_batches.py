"""A worker's completer (recruiter.processes.worker.completer): the outcomes its slots finish
together go in one command, each still fenced by its entry's session and assignment; a command
that is not known to have landed for each (a fence that matched nothing, an outcome the driver
cannot encode) leaves each slot to write its own again alone, losing nothing and writing nothing
a fence refused."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from bson import ObjectId

from recruiter.processes.worker.completer import Completer
from recruiter.store import roster
from recruiter.store.doorbell import doorbell_pipeline
from recruiter.store.outcome_batches import outcome_ops
from tests.integration.test_processes_inproc import Harness, run

NOW = datetime(2026, 1, 1, tzinfo=UTC)


async def assigned(h: Harness, slot: str) -> tuple[ObjectId, ObjectId]:
    """A roster entry ``slot`` of a fresh session, assigned a job: (session, job id)."""
    session, job = ObjectId(), ObjectId()
    await h.db.roster.insert_one({"_id": slot, "session": session, "available": False, "assigned_to": {slot: job},
                                  "job": {"_id": job}})
    return session, job


def ops(slot: str, session: ObjectId, job: ObjectId, outcome: Any = None, **kw: Any) -> list[Any]:
    return outcome_ops(slot, session, job, outcome if outcome is not None else {"token": str(job)},
                       stopping=False, now=NOW, **kw)


def test_outcomes_finished_together_go_in_one_command_each_fenced(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        a, b = await assigned(h, "a"), await assigned(h, "b")
        completer = Completer(h.db.roster, busy=lambda: 2, window_s=5.0)
        answers = await asyncio.gather(completer.write(ops("a", *a)), completer.write(ops("b", *b)))
        assert answers == [True, True]
        assert completer.commands == 1, "both outcomes in one command: the second came before the window ended"
        for slot, (_, job) in (("a", a), ("b", b)):
            entry = await h.db.roster.find_one({"_id": slot})
            assert entry["outcome"] == {"token": str(job)}
            assert entry["available"] is True
            assert "assigned_to" not in entry
    run(db_uri, scenario)


def test_a_lone_slot_sends_at_once_and_a_waiting_one_after_the_window(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        a, b = await assigned(h, "a"), await assigned(h, "b")
        at_once = Completer(h.db.roster, busy=lambda: 1, window_s=30.0)
        assert await asyncio.wait_for(at_once.write(ops("a", *a)), 10) is True, "no other slot runs: no wait"
        waits = Completer(h.db.roster, busy=lambda: 3, window_s=0.05)
        assert await asyncio.wait_for(waits.write(ops("b", *b)), 10) is True, "sent when the window ends"
        assert (at_once.commands, waits.commands) == (1, 1)
    run(db_uri, scenario)


def test_a_fence_that_matches_nothing_leaves_each_slot_to_find_out_alone_and_nothing_fenced_is_written(
        db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        a, b = await assigned(h, "a"), await assigned(h, "b")
        stale = (ObjectId(), b[1])  # b's entry was taken over: another session
        completer = Completer(h.db.roster, busy=lambda: 2, window_s=5.0)
        answers = await asyncio.gather(completer.write(ops("a", *a)), completer.write(ops("b", *stale)))
        assert answers == [None, None], "not known of each: each writes again alone"
        assert (await h.db.roster.find_one({"_id": "b"}))["assigned_to"] == {"b": b[1]}, "the fence held"
        # a's write had landed: written again alone it matches nothing, and its token says it was recorded.
        assert await roster.record_outcome(h.db.roster, "a", a[0], a[1], {"token": str(a[1])},
                                           stopping=False, now=NOW) is False
        assert (await roster.read_recorded_token(h.db.roster, "a"))["outcome"]["token"] == str(a[1])
    run(db_uri, scenario)


def test_a_hostile_outcome_in_a_command_costs_the_others_nothing(db_uri: str) -> None:
    """An outcome the driver cannot encode: the command is refused whole, before anything is sent;
    every slot writes its own again alone, where the hostile one is refused on its own
    (RosterEntries.record then strips it) and the good one lands."""
    async def scenario(h: Harness) -> None:
        a, b = await assigned(h, "a"), await assigned(h, "b")
        hostile = {"token": "x", "result": {1, 2}, "\x00bad": object()}
        completer = Completer(h.db.roster, busy=lambda: 2, window_s=5.0)
        answers = await asyncio.gather(completer.write(ops("a", *a)), completer.write(ops("b", *b, outcome=hostile)))
        assert answers == [None, None]
        assert (await h.db.roster.find_one({"_id": "a"}))["assigned_to"] == {"a": a[1]}, "nothing sent"
        assert await roster.record_outcome(h.db.roster, "a", a[0], a[1], {"token": str(a[1])},
                                           stopping=False, now=NOW) is True, "alone, the good one lands"
        try:
            await roster.record_outcome(h.db.roster, "b", b[0], b[1], hostile, stopping=False, now=NOW)
        except roster.OutcomeRefused:
            pass
        else:
            raise AssertionError("the hostile outcome alone is refused")
    run(db_uri, scenario)


def test_a_quiet_outcome_sets_its_token_and_a_mark_rides_in_the_same_command(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        a, nxt = await assigned(h, "a"), await assigned(h, "a~1")
        await h.db.roster.update_one({"_id": "a~1"}, {"$set": {"ahead": "t1"}})
        completer = Completer(h.db.roster, busy=lambda: 1)
        assert await completer.write(ops("a", *a, mark=("a~1", nxt[0], nxt[1], "t1"), quiet="t0")) is True
        assert (await h.db.roster.find_one({"_id": "a"}))["quiet"] == "t0"
        assert (await h.db.roster.find_one({"_id": "a~1"}))["started"] == "t1"
    run(db_uri, scenario)


def test_the_doorbell_lets_a_quiet_outcome_pass_and_rings_for_any_other(db: Any) -> None:
    """The leader's doorbell filter (recruiter.store.doorbell), run by the server on events shaped as
    the roster's updates: an outcome written quietly rings nothing; a loud one, or an outcome
    written again without ``quiet`` (an older worker, a retry), rings as before."""
    def event(n: int, **fields: Any) -> dict[str, Any]:
        return {"_id": n, "ns": {"db": "x", "coll": "roster"}, "operationType": "update",
                "updateDescription": {"updatedFields": fields, "removedFields": []}}

    db.events.insert_many([
        event(1, outcome={"token": "t"}, available=True, quiet="t"),
        event(2, outcome={"token": "t"}, available=True),
        event(3, started="t"),
        event(4, outcome={"token": "u"}, quiet=None),
    ])
    rang = sorted(d["_id"] for d in db.events.aggregate(doorbell_pipeline()[:1]))
    assert rang == [2], rang
