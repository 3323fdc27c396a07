"""Jobs that wait for other jobs (recruiter.domain.dependencies), on the real server, the
recruiter and a worker driven step by step (tests/integration/test_processes_inproc.py's harness)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from bson import ObjectId

from recruiter.domain.cancel import WAS_WAITING
from recruiter.domain.dependencies import HELD_UNTIL
from recruiter.domain.flows import chain, fan_in
from recruiter.domain.job import JobRefused
from recruiter.processes.worker.runtime import WorkerProcess
from recruiter.processes.worker.state import Slot
from tests.flow_workables import Step, Sum
from tests.integration.test_cli_visible import cli
from tests.integration.test_processes_inproc import START, Harness, run, take_and_work
from tests.workables import AlwaysFails, Record


async def assigned_ids(h: Harness) -> set[ObjectId]:
    return {d["_id"] async for d in h.db.scheduled.find({"locked": True}, {"_id": 1})}


async def work_all(h: Harness, workers: list[tuple[WorkerProcess, Slot]]) -> list[ObjectId]:
    """A round, then every worker given a job runs it; the jobs run (in the order of the workers)."""
    await h.round()
    ran = []
    for process, slot in workers:
        if await process.poll(slot) is not None:
            ran.append(await take_and_work(process, slot))
    await h.round()  # their outcomes applied (and their dependents released)
    return ran


async def sweep(h: Harness) -> int:
    rec = h.recruiter
    assert await rec.lease.acquire()
    return await rec.dependencies.look(rec.leadership, rec.c, h.clock.now())


def test_a_dependent_is_not_handed_out_before_its_dependency_is_archived_then_is(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        first = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        second = await Record(h.db_uri, n=2).as_job_of(h.producer).after(first).enqueue()
        held = await h.job(second)
        assert held is not None
        assert held["scheduled_at"] == HELD_UNTIL  # a 0.1.1 leader hands out only jobs due now
        assert held["after"]["pending"] == [first]
        assert held["after"]["due_at"] == START
        workers = [await h.worker("w1"), await h.worker("w2")]

        assert await work_all(h, workers) == [first]  # two free workers, one job handed out
        released = await h.job(second)
        assert released is not None
        assert released["scheduled_at"] == START
        assert "held" not in released["after"]
        assert released["after"]["pending"] == []
        assert released["after"]["released_at"] == START
        assert await work_all(h, workers) == [second]
        assert [e["n"] for e in await h.ledger(event="start")] == [1, 2]

    run(db_uri, scenario)


def test_a_failed_dependency_archives_its_dependent_naming_it_or_runs_it_if_asked(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        bad = await AlwaysFails(h.db_uri).as_job_of(h.producer).enqueue()
        cancelled = await Record(h.db_uri, n=2).as_job_of(h.producer).after(bad).enqueue()
        after_it = await Record(h.db_uri, n=3).as_job_of(h.producer).after(cancelled).enqueue()
        anyway = await Record(h.db_uri, n=4).as_job_of(h.producer).after(bad, if_failed="run").enqueue()
        workers = [await h.worker("w1")]

        assert await work_all(h, workers) == [bad]
        gone = await h.archived(cancelled)
        assert gone is not None
        assert gone["why"] == "upstream-failed"
        assert gone["reason"] == f"job {bad} it waited for ended not-scheduled-by-retry-policy"
        assert gone["attempts"] == 0
        assert gone["scheduled_at"] == START  # its own due time, not the hold's
        assert "held" not in gone["after"]
        cascaded = await h.archived(after_it)  # its own dependent, in turn
        assert cascaded is not None
        assert cascaded["why"] == "upstream-failed"
        assert str(cancelled) in cascaded["reason"]
        assert await h.job(cancelled) is None
        assert await h.job(after_it) is None
        assert await work_all(h, workers) == [anyway]

    run(db_uri, scenario)


def test_a_dependency_of_no_job_is_refused_and_one_archived_already_counts_at_once(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        nobody = ObjectId()
        with pytest.raises(JobRefused, match=f"waits for {nobody}: no such job"):
            await Record(h.db_uri).as_job_of(h.producer).after(nobody).enqueue()
        assert await h.db.scheduled.count_documents({}) == 0
        workers = [await h.worker("w1")]
        first = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        assert await work_all(h, workers) == [first]
        late = await Record(h.db_uri, n=2).as_job_of(h.producer).after(first).enqueue()
        doc = await h.job(late)
        assert doc is not None
        assert doc["scheduled_at"] == START
        assert doc["after"]["pending"] == []
        assert await work_all(h, workers) == [late]

    run(db_uri, scenario)


def test_a_cancelled_dependency_resolves_its_dependents_at_once(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        first = await Record(h.db_uri, n=1).as_job_of(h.producer).schedule_in(hours=1).enqueue()
        stops = await Record(h.db_uri, n=2).as_job_of(h.producer).after(first).enqueue()
        runs = await Record(h.db_uri, n=3).as_job_of(h.producer).after(first, if_failed="run").enqueue()
        assert (await h.producer.cancel(first)).state == WAS_WAITING
        archived = await h.archived(stops)
        assert archived is not None
        assert archived["why"] == "upstream-failed"
        assert "cancelled" in archived["reason"]
        released = await h.job(runs)
        assert released is not None
        assert released["scheduled_at"] == START
        assert await sweep(h) == 0  # nothing left to look at

    run(db_uri, scenario)


def test_the_sweep_releases_what_a_crash_left_between_an_archive_and_its_release(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        first = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        second = await Record(h.db_uri, n=2).as_job_of(h.producer).after(first).enqueue()
        # The archive as a leader that died before releasing anything leaves it (or a 0.1.1 leader).
        doc = await h.job(first)
        assert doc is not None
        await h.db.archived.insert_one({**doc, "why": "done", "archived_at": START})
        await h.db.scheduled.delete_one({"_id": first})
        held = await h.job(second)
        assert held is not None
        assert held["scheduled_at"] == HELD_UNTIL
        assert await sweep(h) == 1
        released = await h.job(second)
        assert released is not None
        assert released["scheduled_at"] == START
        assert released["after"]["pending"] == []
        assert released["after"]["failed"] == []

    run(db_uri, scenario)


def test_a_dependency_pruned_from_the_archive_counts_as_gone_once_two_looks_find_it_so(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        first = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        second = await Record(h.db_uri, n=2).as_job_of(h.producer).after(first).enqueue()
        await h.db.scheduled.delete_one({"_id": first})  # deleted by hand, no archived copy
        assert await sweep(h) == 0  # suspected: the cleaner deletes a job just before archiving it
        assert await h.job(second) is not None
        assert await sweep(h) == 1  # gone still at the next look
        archived = await h.archived(second)
        assert archived is not None
        assert archived["why"] == "upstream-failed"
        assert "ended gone" in archived["reason"]

    run(db_uri, scenario)


def test_a_job_the_cleaner_deleted_and_has_not_archived_yet_is_not_taken_for_gone(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        first = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        runs_if_gone = await Record(h.db_uri, n=2).as_job_of(h.producer).after(first, on={"gone": "run"}).enqueue()
        doc = await h.job(first)
        assert doc is not None
        await h.db.scheduled.delete_one({"_id": first})  # the cleaner's delete, its archive not written yet
        assert await sweep(h) == 0
        await h.db.archived.insert_one({**doc, "why": "worker-deadline", "archived_at": START})  # now it is
        assert await sweep(h) == 1
        archived = await h.archived(runs_if_gone)
        assert archived is not None
        assert archived["reason"] == f"job {first} it waited for ended worker-deadline"

    run(db_uri, scenario)


def test_a_malformed_dependency_list_is_set_aside_with_its_reason(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        first = await Record(h.db_uri, n=1).as_job_of(h.producer).schedule_in(hours=1).enqueue()
        second = await Record(h.db_uri, n=2).as_job_of(h.producer).after(first).enqueue()
        await h.db.scheduled.update_one({"_id": second}, {"$set": {"after.if_failed": 7}})
        h.clock.advance(timedelta(seconds=1))
        assert await sweep(h) == 0  # it still waits for a queued job: nothing to decide yet
        await h.db.scheduled.update_one({"_id": second}, {"$set": {"after.pending": "x"}})
        assert await sweep(h) == 1
        archived = await h.archived(second)
        assert archived is not None
        assert archived["why"] == "malformed"
        assert archived["reason"].startswith("after.pending")

    run(db_uri, scenario)



def test_jobs_list_show_and_explain_say_what_a_held_job_waits_for(db_uri: str, db: Any) -> None:
    from recruiter import Recruiter

    with Recruiter.connect(db_uri) as rec:
        first = Record(db_uri, n=1).as_job_of(rec).schedule_in(hours=1).enqueue()
        other = Record(db_uri, n=2).as_job_of(rec).schedule_in(hours=1).enqueue()
        held = Record(db_uri, n=3).as_job_of(rec).after(first, other).enqueue()
        explained = rec.admin.explain(held)
        assert explained is not None
        assert explained.code == "waiting-for-jobs"
        assert explained.text == f"waiting for 2 jobs: {first}, {other}"
    listed = cli("jobs", "list", db_uri=db_uri)
    row = next(line for line in listed.stdout.splitlines() if str(held) in line)
    assert "waiting for 2 jobs" in row
    shown = cli("jobs", "show", str(held), db_uri=db_uri)
    assert f"waiting for 2 jobs: {first}, {other}" in shown.stdout
    as_json = json.loads(cli("jobs", "list", "--json", db_uri=db_uri).stdout)
    assert next(j for j in as_json if j["id"] == str(held))["waiting_for"] == [str(first), str(other)]


def test_a_chain_and_a_fan_in_run_in_order_once_each_and_the_fan_in_reads_their_results(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        p: Any = h.producer
        a, b, c = await p.enqueue_many(chain(p, Step(h.db_uri, n=1), Step(h.db_uri, n=2), Step(h.db_uri, n=3)))
        *parts, total = await p.enqueue_many(fan_in(p, [Step(h.db_uri, n=10 * i) for i in (1, 2, 3)],
                                                    Sum(h.db_uri, n=99)))
        workers = [await h.worker(f"w{i}") for i in range(4)]
        ran: list[ObjectId] = []
        for _ in range(4):
            ran += await work_all(h, workers)
        assert set(ran[:4]) == {a, *parts}  # the heads first; nothing that waits
        assert ran[4:] == [b, total, c] or ran[4:] == [total, b, c]
        starts = {e["job"]: e for e in await h.ledger(event="start")}
        assert len(await h.ledger(event="start")) == 7  # each exactly once
        assert starts[str(total)]["after"] == [str(x) for x in parts]
        assert starts[str(total)]["total"] == 60
        assert starts[str(c)]["after"] == [str(b)]
        summed = await h.archived(total)
        assert summed is not None
        assert summed["result"] == 60

    run(db_uri, scenario)


def test_a_chain_written_in_a_cycle_or_with_a_stranger_is_refused_whole(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        p: Any = h.producer
        with pytest.raises(JobRefused, match="no such job"):
            await p.enqueue_many([*chain(p, Step(h.db_uri), Step(h.db_uri)),
                                  Step(h.db_uri).as_job_of(p).after(ObjectId())])
        assert await h.db.scheduled.count_documents({}) == 0
        one, two = chain(p, Step(h.db_uri), Step(h.db_uri))
        looped = _after_also(one, two)
        with pytest.raises(JobRefused, match="cycle"):
            await p.enqueue_many([looped, two])
        assert await h.db.scheduled.count_documents({}) == 0

    run(db_uri, scenario)


def _after_also(first: Any, second: Any) -> Any:
    return first.after(second.options.job_id)


def test_the_dashboard_says_what_a_held_job_waits_for(db_uri: str, db: Any) -> None:
    from recruiter import Recruiter
    from recruiter.store import ensure_indexes_sync, parse_target, sync_client
    from tests.web.test_dashboard_http import client_of

    with Recruiter.connect(db_uri) as rec:
        first = Record(db_uri, n=1).as_job_of(rec).schedule_in(hours=1).enqueue()
        held = Record(db_uri, n=2).as_job_of(rec).after(first).enqueue()
    target = parse_target(db_uri)
    client = sync_client(target, app_name="test-dashboard")
    try:
        ensure_indexes_sync(client[target.database])
        with client_of(client[target.database]) as web:
            assert "waiting for 1 job<" in web.get("/jobs").text.replace("</td>", "<")
            live = web.get(f"/jobs/{held}/live").text
            assert "waiting for 1 job" in live
            assert f"waiting for 1 job: {first}" in live
    finally:
        client.close()


def test_rounds_look_for_dependents_only_while_the_sweep_has_seen_held_jobs(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        def dependents_reads() -> int:
            return len([c for c in h.commands.named("find", "scheduled") if "after.pending" in c.get("filter", {})])

        workers = [await h.worker("w1")]
        assert await sweep(h) == 0  # none held: the rounds stop looking
        plain = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        h.commands.clear()
        assert await work_all(h, workers) == [plain]
        assert dependents_reads() == 0

        first = await Record(h.db_uri, n=2).as_job_of(h.producer).enqueue()
        second = await Record(h.db_uri, n=3).as_job_of(h.producer).after(first).enqueue()
        assert await sweep(h) == 0  # held, nothing to decide yet; the rounds look again
        h.commands.clear()
        assert await work_all(h, workers) == [first]
        assert dependents_reads() == 1
        assert await work_all(h, workers) == [second]  # released by the round that archived the first

    run(db_uri, scenario)


def test_a_resubmit_of_a_held_job_moves_its_own_due_time_not_its_hold(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        first = await Record(h.db_uri, n=1).as_job_of(h.producer).schedule_in(hours=1).enqueue()
        second = await Record(h.db_uri, n=2).as_job_of(h.producer).after(first).enqueue()
        later = START + timedelta(minutes=5)
        assert (await h.producer.resubmit(second, at=later)).state == "rescheduled"
        held = await h.job(second)
        assert held is not None
        assert held["scheduled_at"] == HELD_UNTIL
        assert held["after"]["due_at"] == later
        assert held["after"]["held"] is True

    run(db_uri, scenario)
