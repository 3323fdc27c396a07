"""A fan-in over the inline limit stored with dependency edges (issue 42, recruiter.domain.edges):
each upstream's end is a few small writes, the last two ending at once decide the dependent once,
the sweep resolves what an older process archived without touching the edges, malformed edges are
set aside and never release anything."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import bson
import pytest
from bson import ObjectId
from pymongo import WriteConcern

from recruiter.domain.dependencies import HELD_UNTIL
from recruiter.domain.edges import FRONT_SHOWN, INLINE_MAX
from recruiter.domain.flows import fan_in
from recruiter.domain.job import JobRefused
from recruiter.processes.dependencies import DependencySweep
from recruiter.store.dependencies import release_dependents
from recruiter.store.layout import Collections
from tests.flow_workables import Part
from tests.integration.test_cli_visible import cli
from tests.integration.test_processes_inproc import START, Harness, run

PARTS = INLINE_MAX + 20
PER_JOB = 25


async def _fan_in(h: Harness, parts: int = PARTS, **kw: Any) -> tuple[list[ObjectId], ObjectId]:
    """``parts`` parts due in an hour (no round hands them out) and a job waiting for them all."""
    *ids, final = await h.producer.enqueue_many(
        fan_in(h.producer, [Part(n).as_job_of(h.producer).schedule_in(hours=1) for n in range(parts)], Part(-1), **kw))
    return list(ids), final


async def _archive_by_hand(h: Harness, part: ObjectId, why: str = "done") -> None:
    """An upstream archived by a process that touches no edge (an operator's move, a 0.2.0 leader)."""
    doc = await h.job(part)
    assert doc is not None
    await h.db.archived.insert_one({**doc, "why": why, "archived_at": START})
    await h.db.scheduled.delete_one({"_id": part})


def _writes(h: Harness) -> list[tuple[str, str]]:
    return [(name, coll) for name, coll, _ in h.commands.events
            if name in ("update", "findAndModify", "delete", "insert")]


def test_a_wide_fan_in_is_stored_with_edges_and_each_end_costs_a_small_write(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        parts, final = await _fan_in(h)
        held = await h.job(final)
        assert held is not None
        assert held["after"]["ids"] == [final] == held["after"]["pending"]  # the guard: 0.2.0 never decides it
        assert (held["after"]["edges"], held["after"]["left"], held["after"]["severity"]) == (PARTS, PARTS, -1)
        assert await h.db.dependency_edges.count_documents({"dependent": final}) == PARTS
        size = len(bson.encode(held))
        for n, part in enumerate(parts):
            await _archive_by_hand(h, part)
            h.commands.clear()
            await release_dependents(h.recruiter.c, {part: "done"}, START)
            writes = _writes(h)
            doc = await h.job(final)
            assert doc is not None
            if n < PARTS - 1:
                # One edge deleted, one small write to the dependent: no re-scan, no list rewritten.
                assert sorted(writes) == [("delete", "dependency_edges"), ("findAndModify", "scheduled")], writes
                assert doc["scheduled_at"] == HELD_UNTIL
                assert len(bson.encode(doc)) <= size
        assert doc["scheduled_at"] == START  # released once the last edge is gone
        assert "held" not in doc["after"]
        assert doc["after"]["ids"] == parts  # its list moved into it once: ctx.after, its results
        assert doc["after"]["pending"] == []
        assert await h.db.dependency_edges.count_documents({}) == 0  # its edges and its list gone

    run(db_uri, scenario)


def test_the_last_two_parts_ending_at_once_decide_each_dependent_once(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        parts, runs = await _fan_in(h, if_failed="run")
        cancelled = await Part(3).as_job_of(h.producer).after(*parts).enqueue()
        for part in parts[:-2]:
            await _archive_by_hand(h, part)
        await release_dependents(h.recruiter.c, dict.fromkeys(parts[:-2], "done"), START)
        ended = {parts[-2]: "done", parts[-1]: "cancelled"}
        for part, why in ended.items():
            await _archive_by_hand(h, part, why)
        for _ in range(2):  # each end applied at once by its own caller, twice
            await asyncio.gather(*(release_dependents(h.recruiter.c, {p: w}, START) for p, w in ended.items()))
        assert await h.recruiter.lease.acquire()
        assert await h.recruiter.dependencies.look(h.recruiter.leadership, h.recruiter.c, h.clock.now()) == 0

        doc = await h.job(runs)
        assert doc is not None
        assert doc["scheduled_at"] == START
        assert "held" not in doc["after"]
        assert (doc["after"]["failed_count"], doc["after"]["by"]) == (1, parts[-1])  # counted once
        assert await h.job(cancelled) is None
        archived = await h.archived(cancelled)
        assert archived is not None
        assert archived["why"] == "upstream-failed"
        assert archived["reason"].startswith(f"job {parts[-1]} it waited for ended cancelled")
        assert archived["after"]["ids"] == parts
        assert await h.db.dependency_edges.count_documents({}) == 0

    run(db_uri, scenario)


def test_the_sweep_resolves_edges_an_older_process_did_not_touch_reading_a_bounded_front(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        rec = h.recruiter
        rec.dependencies = DependencySweep(per_job=PER_JOB, per_look=1_000)
        parts, final = await _fan_in(h, on={"failed": "skip"})
        for part in parts:
            await _archive_by_hand(h, part, "crashed" if part == parts[7] else "done")
        assert await rec.lease.acquire()
        looks = 0
        while await h.job(final) is not None:
            h.commands.clear()
            assert await rec.dependencies.look(rec.leadership, rec.c, h.clock.now()) == 1
            limits = [cmd.get("limit") for cmd in h.commands.named("find", "dependency_edges")
                      if "dependent" in cmd.get("filter", {})]
            assert limits.count(PER_JOB) == 1  # the front of its edges, not every sibling,
            assert max(limits) == PER_JOB  # and whether one is left
            looks += 1
            assert looks <= PARTS // PER_JOB + 1
        archived = await h.archived(final)
        assert archived is not None
        assert archived["why"] == "skipped"
        assert archived["reason"].startswith(f"job {parts[7]} it waited for ended crashed, which its policy skips on")

    run(db_uri, scenario)


def test_malformed_edges_are_set_aside_and_never_release_their_dependent(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        rec = h.recruiter
        parts, final = await _fan_in(h)
        # An edge naming no dependent (ignored where it is found), and one of the fan-in naming no upstream.
        await h.db.dependency_edges.insert_many([{"dependent": "nope", "upstream": parts[0]},
                                                 {"dependent": final, "upstream": ["x"]}])
        for part in parts:
            await _archive_by_hand(h, part)
        await release_dependents(rec.c, dict.fromkeys(parts, "done"), START)  # no crash, nothing released
        doc = await h.job(final)
        assert doc is not None
        assert doc["scheduled_at"] == HELD_UNTIL
        assert await rec.lease.acquire()
        assert await rec.dependencies.look(rec.leadership, rec.c, h.clock.now()) == 1
        archived = await h.archived(final)
        assert archived is not None
        assert archived["why"] == "malformed"
        assert "edge.upstream: not a job id" in archived["reason"]
        assert await h.db.dependency_edges.count_documents({"dependent": final}) == 0

    run(db_uri, scenario)


def test_malformed_counters_never_release_and_are_archived_once_no_edge_is_left(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        rec = h.recruiter
        parts, final = await _fan_in(h)
        await h.db.scheduled.update_one({"_id": final}, {"$set": {"after.left": "many", "after.failed_count": None}})
        for part in parts:
            await _archive_by_hand(h, part)
        await release_dependents(rec.c, dict.fromkeys(parts, "done"), START)
        assert await rec.lease.acquire()
        await rec.dependencies.look(rec.leadership, rec.c, h.clock.now())
        assert await h.job(final) is None
        archived = await h.archived(final)
        assert archived is not None
        assert archived["why"] == "malformed"
        assert "after.left" in archived["reason"]

    run(db_uri, scenario)


def test_a_wide_fan_in_on_a_job_of_no_job_is_refused_with_nothing_written(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        parts, _ = await _fan_in(h, parts=INLINE_MAX + 5)
        ghost = ObjectId()
        h.commands.clear()
        with pytest.raises(JobRefused, match=f"waits for {ghost}: no such job"):
            await Part(0).as_job_of(h.producer).after(*parts, ghost).enqueue()
        # The first fan-in's edges and list only.
        assert await h.db.dependency_edges.count_documents({}) == INLINE_MAX + 5 + 1
        ins = [len(cmd["filter"]["_id"]["$in"]) for name, _, cmd in h.commands.events
               if name == "find" and isinstance(cmd.get("filter", {}).get("_id"), dict)]
        assert ins
        assert max(ins) <= 1_000

    run(db_uri, scenario)


def test_jobs_list_show_and_explain_read_what_a_wide_fan_in_waits_for_from_its_edges(db_uri: str) -> None:
    from recruiter import Recruiter

    with Recruiter.connect(db_uri) as rec:
        parts = rec.enqueue_many(Part(n).as_job_of(rec).schedule_in(hours=1) for n in range(PARTS))
        held = Part(-1).as_job_of(rec).after(*parts).enqueue()
        shown = ", ".join(str(p) for p in parts[:5])
        explained = rec.admin.explain(held)
        assert explained is not None
        assert explained.code == "waiting-for-jobs"
        assert explained.text == f"waiting for {PARTS} of {PARTS} jobs: {shown} …"
    listed = cli("jobs", "list", "--limit", "500", db_uri=db_uri)
    row = next(line for line in listed.stdout.splitlines() if str(held) in line)
    assert f"waiting for {PARTS} jobs" in row
    assert f"waiting for {PARTS} of {PARTS} jobs: {shown}" in cli("jobs", "show", str(held), db_uri=db_uri).stdout
    as_json = json.loads(cli("jobs", "list", "--json", "--limit", "500", db_uri=db_uri).stdout)
    # The front its edges show (FRONT_SHOWN), not every id.
    assert next(j for j in as_json if j["id"] == str(held))["waiting_for"] == [str(p) for p in parts[:FRONT_SHOWN]]


def test_a_dependent_whose_list_of_dependencies_is_missing_is_archived_malformed_not_released(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        parts, final = await _fan_in(h)
        await h.db.dependency_edges.delete_one({"_id": final})  # its list, lost
        for part in parts:
            await _archive_by_hand(h, part)
        await release_dependents(h.recruiter.c, dict.fromkeys(parts, "done"), START)
        assert await h.job(final) is None
        archived = await h.archived(final)
        assert archived is not None
        assert archived["why"] == "malformed"
        assert "its list of dependencies" in archived["reason"]

    run(db_uri, scenario)


def test_the_edges_of_a_dependent_cancelled_while_held_go_with_the_first_end_of_a_part(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        parts, final = await _fan_in(h)
        await _archive_by_hand(h, final, "cancelled")  # an operator's cancel archives it as it is
        await _archive_by_hand(h, parts[0])
        await release_dependents(h.recruiter.c, {parts[0]: "done"}, START)
        assert await h.db.dependency_edges.count_documents({}) == 0  # its edges and its list

    run(db_uri, scenario)


def test_the_last_two_parts_ending_in_two_transactions_at_once_decide_the_dependent_once(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        parts, final = await _fan_in(h, if_failed="run")
        for part in parts[:-2]:
            await _archive_by_hand(h, part)
        await release_dependents(h.recruiter.c, dict.fromkeys(parts[:-2], "done"), START)
        ended = {parts[-2]: "crashed", parts[-1]: "done"}
        for part, why in ended.items():
            await _archive_by_hand(h, part, why)
        inside = Collections.of(h.db.with_options(write_concern=WriteConcern()))
        both = asyncio.Event()
        started: list[int] = []

        async def end(part: ObjectId, why: str) -> None:
            async with h.db.client.start_session() as session:
                async def body(s: Any) -> None:
                    async with s.bind(end_session=False):
                        started.append(1)
                        if len(started) == 2:  # both transactions begun before either writes
                            both.set()
                        await asyncio.wait_for(both.wait(), 10)
                        await release_dependents(inside, {part: why}, START)

                await session.with_transaction(body)

        await asyncio.gather(*(end(p, w) for p, w in ended.items()))
        doc = await h.job(final)
        assert doc is not None
        assert doc["scheduled_at"] == START  # released at once, not left to the sweep
        assert "held" not in doc["after"]
        assert (doc["after"]["failed_count"], doc["after"]["by"]) == (1, parts[-2])
        assert doc["after"]["ids"] == parts
        assert await h.db.dependency_edges.count_documents({}) == 0

    run(db_uri, scenario)


def test_a_workflow_step_waiting_for_more_than_100_steps_is_explained_by_step_from_its_edges(db_uri: str) -> None:
    from recruiter import Recruiter, Workflow

    with Recruiter.connect(db_uri) as rec:
        wf = Workflow("wide")
        names = wf.fan_out("part", [Part(n) for n in range(PARTS)])
        wf.step("total", Part(-1), deps=names)
        done = wf.enqueue(rec)
    explained = cli("jobs", "explain", str(done["total"]), db_uri=db_uri).stdout
    shown = ", ".join(f"part-{k} (queued)" for k in range(1, 11))
    assert f"waiting on step {shown} and {PARTS - 10} more" in explained


def test_a_wide_fan_in_cancelled_or_deleted_while_held_takes_its_edges_and_list_with_it(db_uri: str) -> None:
    from recruiter import Recruiter

    with Recruiter.connect(db_uri) as rec:
        parts = rec.enqueue_many(Part(n).as_job_of(rec).schedule_in(hours=1) for n in range(PARTS))
        cancelled = Part(-1).as_job_of(rec).after(*parts).enqueue()
        deleted = Part(-2).as_job_of(rec).after(*parts).enqueue()
        edges = rec.db["dependency_edges"]
        assert edges.count_documents({}) == 2 * (PARTS + 1)
        rec.cancel(cancelled)
        assert edges.count_documents({"dependent": cancelled}) == 0
        assert edges.count_documents({"_id": cancelled}) == 0
        (result,) = rec.admin.delete([deleted])
        assert edges.count_documents({}) == 0, result
