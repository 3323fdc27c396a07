"""A worker's writes of each job are not retryable writes (recruiter.store.unrecorded): the
embedded server keeps the reply of every retryable write and goes through all of them on each
one, so a per-job retryable write slowed the whole server down after a few minutes."""

from __future__ import annotations

from typing import Any

import pytest
from bson import ObjectId

from recruiter.store import roster, unrecorded
from tests.integration.test_processes_inproc import Harness, run, take_and_work
from tests.workables import Record


def _retryable_writes_taken(h: Harness) -> bool:
    """Whether this server takes retryable writes (a standalone mongod does not): a plain
    ``update_one`` then carries a transaction number."""
    return "txnNumber" in h.commands.named("update", "roster")[-1]


def _outcome_writes(h: Harness) -> list[dict[str, Any]]:
    return [cmd for cmd in h.commands.named("update", "roster")
            if any("outcome" in str(s.get("u")) for s in cmd["updates"])]


def test_a_jobs_outcome_is_written_as_no_retryable_write_and_applied_as_before(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        process, slot = await h.worker("w1")
        await h.db.roster.update_one({"_id": "w1"}, {"$set": {"probe": 1}})  # the control: update_one
        if not _retryable_writes_taken(h):
            pytest.skip("this server takes no retryable writes (a standalone mongod)")
        job = await Record(h.db_uri, n=7).as_job_of(h.producer).enqueue()
        await h.round()
        h.commands.clear()
        assert await take_and_work(process, slot) == job

        (sent,) = _outcome_writes(h)
        assert "txnNumber" not in sent
        (statement,) = sent["updates"]
        assert statement["multi"] is True
        assert statement["q"]["_id"] == "w1"
        assert statement["q"]["session"] == slot.session
        assert (await h.roster("w1"))["outcome"]["job"] == job
        await h.round()
        assert (await h.archived(job))["why"] == "done"
        assert await h.job(job) is None

    run(db_uri, scenario)


def test_the_outcome_with_a_started_mark_and_the_mark_alone_are_no_retryable_writes(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        s1, s2, job, nxt, token = ObjectId(), ObjectId(), ObjectId(), ObjectId(), ObjectId()
        await h.db.roster.insert_many([
            {"_id": "a", "session": s1, "available": False, "assigned_to": {"a": job}},
            {"_id": "a~1", "session": s2, "available": False, "assigned_to": {"a~1": nxt}},
            {"_id": "b", "session": s1, "available": False, "assigned_to": {"b": nxt}},
        ])
        await h.db.roster.update_one({"_id": "b"}, {"$set": {"probe": 1}})
        if not _retryable_writes_taken(h):
            pytest.skip("this server takes no retryable writes (a standalone mongod)")
        h.commands.clear()
        both = await roster.record_outcome_and_mark(
            h.db.roster, "a", s1, job, {"job": job, "token": token}, stopping=False, now=h.clock.now(),
            mark=("a~1", s2, nxt, token))
        marked = await roster.mark_started(h.db.roster, "b", s1, nxt, token)
        missed = await roster.mark_started(h.db.roster, "b", ObjectId(), nxt, token)  # another session

        sent = h.commands.named("update", "roster")
        assert len(sent) == 3
        assert all("txnNumber" not in cmd for cmd in sent)
        assert both == (True, True)
        assert marked is True
        assert missed is False
        assert (await h.roster("a"))["outcome"]["token"] == token
        assert "assigned_to" not in await h.roster("a")
        assert (await h.roster("a~1"))["started"] == token
        assert (await h.roster("b"))["started"] == token

    run(db_uri, scenario)


@pytest.mark.parametrize("query", [{}, {"session": 1}, {"_id": None}, {"_id": {"$in": ["a", "b"]}},
                                   {"_id": {"$exists": True}}])
def test_an_unrecorded_update_names_one_document_by_id(query: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="names its document by _id"):
        unrecorded.update_model(query, {"$set": {"x": 1}})


def test_an_id_that_is_an_embedded_document_names_one_document(db: Any) -> None:
    db.things.insert_many([{"_id": {"host": "h", "n": 1}}, {"_id": {"host": "h", "n": 2}}])
    result = db.things.bulk_write([unrecorded.update_model({"_id": {"host": "h", "n": 1}}, {"$set": {"x": 1}})])
    assert result.modified_count == 1
    assert [d["_id"]["n"] for d in db.things.find({"x": 1})] == [1]
