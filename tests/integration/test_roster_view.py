"""The leader keeps the free roster entries it has read (recruiter.processes.roster_view): a steady
round reads what changed, not the roster; a registration is seen by the next round; an entry kept
but gone since is found out by the assignment and forgotten."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from bson import ObjectId

from tests.integration.test_processes_inproc import Harness, run
from tests.workables import Record


def _full_reads(h: Harness) -> list[dict[str, Any]]:
    """The round's reads of every free entry (the whole roster's ``$or``)."""
    return [f for f in h.commands.named("find", "roster") if "$or" in f["filter"]]


def test_a_steady_round_reads_the_entries_that_changed_not_the_roster(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        for i in range(30):
            await h.worker(f"w{i:02}")
            h.clock.advance(timedelta(milliseconds=10))  # w00 has waited longest
        first = await h.round()  # a leadership's first round reads the whole roster
        assert first.free_workers == 30
        job = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()

        h.commands.clear()
        report = await h.round()
        full, roster_reads, documents = _full_reads(h), h.commands.named("find", "roster"), h.commands.documents
        assert report.assigned == 1
        assert (await h.roster("w00"))["assigned_to"] == {"w00": job}  # longest free first, as before
        assert full == []
        assert {next(iter(f["filter"])) for f in roster_reads} == {"outcome.token", "freed"}
        # Nothing changed in the roster: the 29 other free entries and their beats are not read again.
        assert documents < 10

    run(db_uri, scenario)


def test_beats_are_read_by_id_and_the_stale_ones_at_most_once_a_second(db_uri: str) -> None:
    """The beats a round needs are read by ``_id`` (the entries' process documents), never by the
    documents' ``ids`` arrays, which the embedded server matches by scanning; the stale beats
    are a read of their own, at a leadership's first round and then once a second at most."""
    async def scenario(h: Harness) -> None:
        for i in range(12):
            await h.worker(f"w{i:02}")
        h.commands.clear()
        first = await h.round()
        assert first.free_workers == 12  # every beat was found by _id
        reads = [f["filter"] for f in h.commands.named("find", "heartbeats")]
        # The stale beats and those dated too far ahead (liveness.dated_ahead): two reads, never one $or.
        assert sorted(next(iter(f)) for f in reads) == ["_id", "fresh_until", "fresh_until"], reads
        assert all("ids" not in str(f) and "$or" not in f for f in reads), reads

        h.commands.clear()
        h.clock.advance(timedelta(milliseconds=300))
        await h.round()  # the beats kept are fresh, and the stale ones were read 0.3 s ago
        assert h.commands.named("find", "heartbeats") == []
        h.clock.advance(timedelta(seconds=1))
        await h.round()
        assert [next(iter(f["filter"])) for f in h.commands.named("find", "heartbeats")] == ["fresh_until"] * 2

    run(db_uri, scenario)


def test_a_worker_registered_after_the_first_round_is_given_work_by_the_next(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        await h.worker("old", "a")
        await h.round()
        await h.worker("new", "b")  # its entry carries a "freed" mark
        assert "freed" in (await h.roster("new") or {})
        job = await Record(h.db_uri, n=1).as_job_of(h.producer).in_group("b").enqueue()
        h.commands.clear()
        report = await h.round()
        assert report.assigned == 1
        assert (await h.roster("new"))["assigned_to"] == {"new": job}
        assert "freed" not in (await h.roster("new") or {})  # the round that read the mark removed it
        assert _full_reads(h) == []

    run(db_uri, scenario)


def test_an_entry_kept_but_gone_since_is_found_by_the_assignment_and_its_job_goes_elsewhere(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        await h.worker("first")
        h.clock.advance(timedelta(seconds=1))
        await h.worker("second")
        await h.round()  # both kept as free
        await h.db.roster.delete_one({"_id": "first"})  # removed behind the leader's back
        job = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        missed = await h.round()
        assert missed.assigned == 0  # the assignment found "first" gone and rolled the lock back
        assert (await h.job(job))["locked"] is False
        assert "first" not in h.recruiter.planner.view.free
        again = await h.round()
        assert again.assigned == 1
        assert (await h.roster("second"))["assigned_to"] == {"second": job}

    run(db_uri, scenario)


def test_a_hand_written_entry_whose_id_is_a_document_does_not_stop_the_rounds(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        await h.worker("w")
        await h.round()
        # A mongosh edit: an entry with a document for _id, holding an outcome and freed.
        await h.db.roster.insert_one({"_id": {"odd": 1}, "available": True, "freed": 1,
                                      "outcome": {"token": 1, "job": 1}})
        job = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        report = await h.round()
        assert report.assigned == 1
        assert (await h.roster("w"))["assigned_to"] == {"w": job}

    run(db_uri, scenario)


def test_a_round_woken_by_an_enqueue_reads_its_candidates_with_its_roster_and_chooses_the_same(db_uri: str) -> None:
    """A round woken by enqueued jobs alone (``early_candidates``) starts its candidate reads for
    the free workers kept, at the same time as its roster reads: with nothing changed in the
    roster it chooses from them, and what it hands out is what a plain round would."""
    async def scenario(h: Harness) -> None:
        for i in range(3):
            await h.worker(f"w{i}")
            h.clock.advance(timedelta(milliseconds=10))  # w0 has waited longest
        await h.round()
        job = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        h.recruiter.planner.early_candidates = True
        h.commands.clear()
        report = await h.round()
        assert report.assigned == 1
        assert h.recruiter.planner.early_used == 1
        assert (await h.roster("w0"))["assigned_to"] == {"w0": job}  # longest free first, as before
        # One set of candidate reads, not two: no read of scheduled sent twice.
        reads = [repr(f["filter"]) for f in h.commands.named("find", "scheduled")]
        assert reads
        assert len(reads) == len(set(reads)), reads
        assert h.recruiter.planner.early_candidates is False  # for that round only

    run(db_uri, scenario)


def test_early_candidate_reads_are_dropped_when_the_roster_changed_meanwhile(db_uri: str) -> None:
    """A worker registered between the rounds: the early reads were for the workers kept, the
    round finds one more, so it reads its candidates again for the workers it found."""
    async def scenario(h: Harness) -> None:
        await h.worker("old", "a")
        await h.round()
        await h.worker("new", "b")  # not among the workers kept
        job = await Record(h.db_uri, n=1).as_job_of(h.producer).in_group("b").enqueue()
        h.recruiter.planner.early_candidates = True
        report = await h.round()
        assert h.recruiter.planner.early_used == 0
        assert report.assigned == 1
        assert (await h.roster("new"))["assigned_to"] == {"new": job}

    run(db_uri, scenario)


def _checks(h: Harness) -> list[dict[str, Any]]:
    """The check of what the leader keeps: one aggregation on the roster (``settled_free``)."""
    return h.commands.named("aggregate", "roster")


def test_the_periodic_check_reads_one_document_not_the_roster(db_uri: str) -> None:
    """Every ``full_read_s`` the leader checks what it keeps with one aggregation: with nothing
    missed (here a new registration and a kept entry marked again, both read by the round), the
    roster's other free entries are not read again."""
    async def scenario(h: Harness) -> None:
        for i in range(21):
            await h.worker(f"w{i:02}")
        await h.round()
        await h.db.roster.update_one({"_id": "w05"}, {"$set": {"freed": ObjectId()}})  # kept, marked again
        await h.worker("late")  # a new entry, with its freed mark
        h.recruiter.planner.view.next_full = 0.0  # the check is due
        h.commands.clear()
        await h.round()
        assert _full_reads(h) == []
        assert len(_checks(h)) == 1
        assert len(h.recruiter.planner.view.free) == 22
        assert h.commands.documents < 10  # the changed entries and the check, not the 22 free entries

    run(db_uri, scenario)


def test_the_check_finds_an_entry_freed_without_a_mark(db_uri: str) -> None:
    """Freed by hand or by an older worker (no ``freed`` mark): the rounds' reads of what changed
    do not show it; the check counts one free entry more than the leader keeps, and the round
    reads the whole roster."""
    async def scenario(h: Harness) -> None:
        for i in range(3):
            await h.worker(f"w{i}")
            h.clock.advance(timedelta(milliseconds=10))
        await h.round()
        await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        assert (await h.round()).assigned == 1
        assert "w0" not in h.recruiter.planner.view.free
        await h.db.roster.update_one({"_id": "w0"}, {"$set": {"available": True},
                                                    "$unset": {"assigned_to": "", "job": ""}})
        await h.round()
        assert "w0" not in h.recruiter.planner.view.free  # no check due: the changed entries alone do not show it
        h.recruiter.planner.view.next_full = 0.0
        h.commands.clear()
        await h.round()
        assert len(_checks(h)) == 1
        assert len(_full_reads(h)) == 1
        assert "w0" in h.recruiter.planner.view.free

    run(db_uri, scenario)


def test_a_check_that_finds_a_kept_entry_changed_reads_the_whole_roster(db_uri: str) -> None:
    """An entry kept but deleted, or registered again (another ``session``) without a mark: the
    count or the sessions' sum of those kept differs, and the round reads the whole roster."""
    async def scenario(h: Harness) -> None:
        for i in range(4):
            await h.worker(f"w{i}")
        await h.round()
        await h.db.roster.delete_one({"_id": "w1"})
        h.recruiter.planner.view.next_full = 0.0
        h.commands.clear()
        await h.round()
        assert len(_full_reads(h)) == 1
        assert set(h.recruiter.planner.view.free) == {"w0", "w2", "w3"}

        fresh = ObjectId.from_datetime(ObjectId().generation_time + timedelta(seconds=5))
        await h.db.roster.update_one({"_id": "w2"}, {"$set": {"session": fresh}})
        h.recruiter.planner.view.next_full = 0.0
        h.commands.clear()
        await h.round()
        assert len(_full_reads(h)) == 1
        assert h.recruiter.planner.view.free["w2"]["session"] == fresh

        h.commands.clear()
        await h.round()  # the check is not due again for full_read_s
        assert _full_reads(h) == []
        assert _checks(h) == []

    run(db_uri, scenario)


def test_the_whole_roster_is_read_again_every_whole_read_s_in_place_of_a_check(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        await h.worker("w")
        await h.round()
        view = h.recruiter.planner.view
        assert view.next_whole is not None
        assert view.next_full is not None
        assert view.next_whole - view.next_full == pytest.approx(view.whole_read_s - view.full_read_s)
        view.next_full = view.next_whole = 0.0
        h.commands.clear()
        await h.round()
        assert len(_full_reads(h)) == 1
        assert _checks(h) == []

    run(db_uri, scenario)
