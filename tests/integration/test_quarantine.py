"""Malformed documents on a real server, the processes driven step by step.

A malformed job is quarantined (archived ``why: "malformed"`` with a reason,
deleted from ``scheduled``) by the round, the cleaner pass or the sweep that
meets it; the other jobs go on as if it were not there.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from bson import ObjectId
from pymongo.errors import WriteError

from recruiter.domain.documents import check_job
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.processes.upkeep import quarantine, sweep
from recruiter.store.layout import Collections
from tests.integration.test_processes_inproc import DEAD_AFTER_S, START, Harness, run, take_and_work
from tests.workables import Record


def raw_job(h: Harness, n: int, **changes: Any) -> dict[str, Any]:
    doc = build_job_document(Record(h.db_uri, n=n), JobOptions(group="g"), START)
    doc.update(changes)
    return doc


def test_a_malformed_candidate_is_quarantined_by_the_round_that_meets_it(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        good = [await Record(h.db_uri, n=i).as_job_of(h.producer).in_group("g").enqueue() for i in range(2)]
        bad = raw_job(h, 99, tenant=7, created_at=START - timedelta(hours=1))  # older: first in line
        await h.db.scheduled.insert_one(bad, bypass_document_validation=True)
        workers = [await h.worker(f"w{i}") for i in range(3)]

        report = await h.round()

        assert report.assigned == 2
        archived = await h.archived(bad["_id"])
        assert archived is not None
        assert archived["why"] == "malformed"
        assert archived["reason"] == "tenant: expected a non-empty string or null, got int"
        assert archived["tenant"] == 7
        assert await h.job(bad["_id"]) is None
        for process, slot in workers:
            if await process.poll(slot) is not None:
                await take_and_work(process, slot)
        await h.settle()
        assert [(await h.archived(j) or {}).get("why") for j in good] == ["done", "done"]
        assert {d["n"] for d in await h.ledger(event="start")} == {0, 1}

    run(db_uri, scenario)


def test_a_worker_handed_a_malformed_job_does_not_run_it_and_the_next_round_quarantines_it(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        job_id = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        process, slot = await h.worker("w1")
        await h.round()
        # Changed after it was assigned (a hand edit): the copy and the job lose created_at.
        await h.db.scheduled.update_one({"_id": job_id}, {"$unset": {"created_at": ""}},
                                        bypass_document_validation=True)
        await h.db.roster.update_one({"_id": "w1"}, {"$unset": {"job.created_at": ""}})

        await take_and_work(process, slot)
        await h.round()

        archived = await h.archived(job_id)
        assert archived is not None
        assert archived["why"] == "malformed"
        assert archived["reason"] == "created_at: missing"
        assert await h.ledger(event="start") == []
        entry = await h.roster("w1")
        assert entry is not None
        assert entry["available"]
        assert "outcome" not in entry

    run(db_uri, scenario)


def test_the_sweep_finds_exactly_the_jobs_no_candidate_read_can_meet(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        for n in range(2):
            await Record(h.db_uri, n=n).as_job_of(h.producer).enqueue()
        await h.worker("w1")
        await h.round()  # one job locked and assigned: reachable, well-formed
        assert await h.db.scheduled.count_documents({"locked": True}) == 1
        await Record(h.db_uri, n=2).as_job_of(h.producer).enqueue()
        unreachable = [
            raw_job(h, 10, scheduled_at="2026-01-01"), {k: v for k, v in raw_job(h, 11).items() if k != "locked"},
            {k: v for k, v in raw_job(h, 12).items() if k != "status"}, raw_job(h, 13, group="a\x00b"),
            raw_job(h, 14, tenant=""), raw_job(h, 15, locked=True, status="assigned", locked_by="x",
                                                 locked_at=START),
            raw_job(h, 16, status="assigned"), raw_job(h, 17, group=["g"]), {"_id": ObjectId()},
        ]
        await h.db.scheduled.insert_many(unreachable, bypass_document_validation=True)

        found = await sweep(h.db.scheduled)

        assert {m.id for m in found} == {d["_id"] for d in unreachable}
        assert all(m.reason for m in found)

    run(db_uri, scenario)


def test_quarantine_is_idempotent_and_reports_only_what_it_archived(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        docs = [raw_job(h, 1, group=5), raw_job(h, 2, _id={"odd": "id"}, tenant=3)]
        await h.db.scheduled.insert_many(docs, bypass_document_validation=True)
        found = [m for d in docs if (m := check_job(d)) is not None]
        c = Collections.of(h.db)

        assert len(await quarantine(c, found + found, START)) == 2
        assert await quarantine(c, found, START) == []

        assert await h.db.scheduled.count_documents({}) == 0
        assert await h.db.archived.count_documents({"why": "malformed"}) == 2
        odd = await h.db.archived.find_one({"_id": {"odd": "id"}})
        assert odd is not None
        assert odd["reason"].startswith("_id:")

    run(db_uri, scenario)


def test_the_cleaner_removes_a_dead_malformed_entry_and_quarantines_its_malformed_lock(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        old = START - timedelta(seconds=DEAD_AFTER_S * 2)
        job = raw_job(h, 1, locked=True, status="assigned", locked_by="ghost", locked_at=old)  # no lock_token
        await h.db.scheduled.insert_one(job, bypass_document_validation=True)
        await h.db.roster.insert_many([
            {"_id": "ghost", "available": False, "work_on": "g", "last_seen_at": old, "working_on": job["_id"],
             "outcome": {"job": job["_id"], "decision": "done"}},
            {"_id": "ghost-2", "available": True, "last_seen_at": "yesterday"},
        ])
        cleaner = await h.cleaner()

        report = await cleaner.fenced_clean()

        assert report.dead_workers == 2
        assert [m.id for m in report.quarantined] == [job["_id"]]
        assert await h.db.roster.count_documents({}) == 0
        archived = await h.archived(job["_id"])
        assert archived is not None
        assert archived["reason"] == "lock_token: missing"

    run(db_uri, scenario)


def test_malformed_metadata_and_roster_entries_do_not_stop_rounds(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        await h.db.metadata.insert_many([
            {"_id": "fairness", "last_group": 5, "last_tenant": "g", "counts": [1]},
            {"_id": "paused", "groups": [{"g": 1}], "tenants": 3},
        ])
        await h.db.roster.insert_one({"_id": "odd", "available": True, "work_on": "g", "last_seen_at": START,
                                      "available_since": "now"})
        ids = [await Record(h.db_uri, n=i).as_job_of(h.producer).in_group("g").for_tenant(t).enqueue()
               for i, t in enumerate(["a", "b"])]
        process, slot = await h.worker("w1", "g")

        for _ in range(2):
            assert (await h.round()).assigned == 1
            await take_and_work(process, slot)
        await h.settle()

        assert [(await h.archived(j) or {}).get("why") for j in ids] == ["done", "done"]
        cursor = await h.db.metadata.find_one({"_id": "fairness"})
        assert cursor is not None
        assert cursor["last_group"] == "g"
        assert isinstance(cursor["last_tenant"], dict)

    run(db_uri, scenario)


def test_the_validator_refuses_a_malformed_insert_and_leaves_stored_ones_deletable(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        with pytest.raises(WriteError) as refused:
            await h.db.scheduled.insert_one(raw_job(h, 1, group=5))
        assert refused.value.code == 121  # DocumentValidationFailure
        await h.db.scheduled.insert_one(raw_job(h, 2, group="*"))  # the reader is stricter: it quarantines this
        stored = raw_job(h, 3, attempts="x")
        await h.db.scheduled.insert_one(stored, bypass_document_validation=True)
        found = check_job(stored)
        assert found is not None
        assert await quarantine(Collections.of(h.db), [found], START) == [found]  # "moderate": not blocked

    run(db_uri, scenario)


def test_a_malformed_lease_document_is_taken_over_not_obeyed_forever(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        await h.db.metadata.insert_many([
            {"_id": "recruiter", "owner": "ghost", "expires_at": "never", "epoch": "seven", "session": "x"},
            {"_id": "cleaner", "owner": "ghost", "epoch": float("nan")},
        ])
        job_id = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        process, slot = await h.worker("w1")

        assert (await h.round()).assigned == 1
        assert h.recruiter.lease.epoch == 1
        await take_and_work(process, slot)
        await h.round()
        cleaner = await h.cleaner()
        await cleaner.fenced_clean()

        assert cleaner.lease.epoch == 1
        assert (await h.archived(job_id) or {}).get("why") == "done"

    run(db_uri, scenario)


@pytest.mark.parametrize(("parameters", "reason"), [
    ({"order": {"$where": "sleep(1000)"}},
     "workable.parameters.order.$where: field name starts with '$'"),
    ({"prices": [{"eur": 1}, {"usd.cents": 2}]},
     "workable.parameters.prices.1.usd.cents: field name holds a '.'"),
])
def test_a_hand_written_job_whose_names_an_update_cannot_store_is_quarantined_before_any_round_writes_it(
        db_uri: str, parameters: dict[str, Any], reason: str) -> None:
    """The round copies each job into the roster with an update, which MongoDB refuses for these
    names: on the code before the check, the write guard failed this test on that copy."""
    async def scenario(h: Harness) -> None:
        good = await Record(h.db_uri, n=1).as_job_of(h.producer).in_group("g").enqueue()
        hour_ago = START - timedelta(hours=1)
        bad = raw_job(h, 99, created_at=hour_ago, scheduled_at=hour_ago)  # older: first in line
        bad["workable"]["parameters"] = parameters
        await h.db.scheduled.insert_one(bad)  # MongoDB 5.0+ inserts such names (mongosh, another client)
        workers = [await h.worker(f"w{i}", "g") for i in range(2)]

        report = await h.round()

        assert report.assigned == 1
        archived = await h.archived(bad["_id"])
        assert archived is not None
        assert (archived["why"], archived["reason"].split(";")[0]) == ("malformed", reason)
        assert "original_bson" in archived  # kept whole, as raw BSON
        assert await h.job(bad["_id"]) is None
        for process, slot in workers:
            if await process.poll(slot) is not None:
                await take_and_work(process, slot)
        await h.settle()
        assert (await h.archived(good) or {}).get("why") == "done"

    run(db_uri, scenario)


def test_a_hand_written_job_nested_deeper_than_its_copy_can_be_is_quarantined(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        deep: dict[str, Any] = {"s": 1}
        for _ in range(96):
            deep = {"s": deep}
        bad = raw_job(h, 99, scheduled_at=START - timedelta(hours=1))
        bad["workable"]["parameters"] = {"deep": deep}  # 100 levels: MongoDB inserts it, the roster copy is 101
        await h.db.scheduled.insert_one(bad)
        await h.worker("w1")

        await h.round()

        archived = await h.archived(bad["_id"])
        assert archived is not None
        assert archived["reason"] == "document: nested 100 levels deep; a job copied into the roster may nest 98"

    run(db_uri, scenario)
