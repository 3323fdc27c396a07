"""Hostile shapes of the newest stored fields on a real server, the processes driven step by step
(tests/integration/test_processes_inproc.py's harness): each is written straight into its
collection, then rounds, a worker or the cleaner run beside normal jobs. Nothing escapes, the
round goes on, the normal jobs run once, and the hostile document is set aside with its reason
or ignored, never obeyed past a safeguard."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import ObjectId
from structlog.testing import capture_logs

from recruiter import Recruiter
from recruiter.admin.status import status
from recruiter.cli.status import figures_of, render_status
from recruiter.domain.cancel import WAS_WAITING
from recruiter.domain.start_gate import Gate, gate_id
from recruiter.domain.versions import RELEASE
from recruiter.processes.releases import refuse_leaders
from recruiter.processes.worker.poller import Poller
from recruiter.processes.worker.runtime import WorkerProcess
from recruiter.processes.worker.state import Slot
from tests.integration.test_fan_in_edges import _fan_in
from tests.integration.test_processes_inproc import DEAD_AFTER_S, START, Harness, run, take_and_work
from tests.integration.test_start_gates import GATE, _taken
from tests.processes.test_limits_processes import most_in_a_window
from tests.workables import Record

# A held dependent whose ``after`` is matched by its upstream's id, yet holds no list to pull it from.
PENDING_NOT_A_LIST = [
    ("after-an-array", lambda after, up: [after], "after: not a document"),
    ("pending-an-id", lambda after, up: {**after, "pending": up}, "after.pending: not a list of job ids"),
]


async def _both_run(h: Harness, workers: list[tuple[WorkerProcess, Slot]]) -> None:
    """One round gives each of the two workers a job, each runs it, the next round applies both outcomes."""
    assert (await h.round()).assigned == 2
    for process, slot in workers:
        await take_and_work(process, slot)
    assert (await h.round()).applied == 2


async def _held_with(h: Harness, upstream: ObjectId, shape: Any) -> ObjectId:
    dependent = await Record(h.db_uri, n=2).as_job_of(h.producer).after(upstream).enqueue()
    held = await h.job(dependent)
    assert held is not None
    await h.db.scheduled.update_one({"_id": dependent}, {"$set": {"after": shape(held["after"], upstream)}},
                                    bypass_document_validation=True)
    return dependent


@pytest.mark.parametrize(("name", "shape", "reason"), PENDING_NOT_A_LIST, ids=[c[0] for c in PENDING_NOT_A_LIST])
def test_a_dependent_whose_pending_is_no_list_is_set_aside_by_the_round_that_archives_its_upstream(
        db_uri: str, name: str, shape: Any, reason: str) -> None:
    """On the code before the check, the round's ``$pullAll`` (or its read of ``after``) raised, and
    every round after it, applying the same outcome: the leader stopped for good."""
    async def scenario(h: Harness) -> None:
        upstream = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        dependent = await _held_with(h, upstream, shape)
        beside = await Record(h.db_uri, n=3).as_job_of(h.producer).enqueue()
        workers = [await h.worker("w1"), await h.worker("w2")]

        await _both_run(h, workers)
        await h.settle()

        assert [(await h.archived(j) or {}).get("why") for j in (upstream, beside)] == ["done", "done"]
        archived = await h.archived(dependent)
        assert archived is not None
        assert (archived["why"], archived["reason"]) == ("malformed", reason)
        assert await h.job(dependent) is None
        assert sorted(d["n"] for d in await h.ledger(event="start")) == [1, 3]

    run(db_uri, scenario)


@pytest.mark.parametrize(("name", "shape", "reason"), PENDING_NOT_A_LIST, ids=[c[0] for c in PENDING_NOT_A_LIST])
def test_a_dependent_whose_pending_is_no_list_is_set_aside_by_a_cancel_of_its_upstream(
        db_uri: str, name: str, shape: Any, reason: str) -> None:
    """The synchronous client's release (recruiter.store.dependents_sync), after a cancel: the
    cancel is done and says so; on the code before the check, it raised after its commit."""
    async def scenario(h: Harness) -> None:
        upstream = await Record(h.db_uri, n=1).as_job_of(h.producer).schedule_in(hours=1).enqueue()
        dependent = await _held_with(h, upstream, shape)
        with Recruiter.connect(h.db_uri) as rec:
            assert rec.cancel(upstream).state == WAS_WAITING

        archived = await h.archived(dependent)
        assert archived is not None
        assert (archived["why"], archived["reason"]) == ("malformed", reason)
        assert (await h.archived(upstream) or {}).get("why") == "cancelled"

    run(db_uri, scenario)


@pytest.mark.parametrize(("execution", "reason"), [
    ({"started_at": START, "$where": "sleep(1000)"}, "outcome.execution.$where: field name starts with '$'"),
    ({"started_at": START, "a.b": 1}, "outcome.execution.a.b: field name holds a '.'"),
], ids=["dollar", "dot"])
def test_an_outcome_whose_attempt_no_update_can_write_is_not_applied_and_the_round_goes_on(
        db_uri: str, execution: dict[str, Any], reason: str) -> None:
    """An entry written whole (an insert stores such names) holding a retry whose ``execution`` the
    round would ``$set`` into its job's history: on the code before the check, that write went out
    (MongoDB refuses it, and the round with it, at every round; the write guard failed this test)
    and the job, rewritten, was then quarantined. The entry is skipped, said once; its job stays
    locked to it (the cleaner unlocks it once the worker is dead); the job beside runs once."""
    async def scenario(h: Harness) -> None:
        ids = [await Record(h.db_uri, n=i).as_job_of(h.producer).enqueue() for i in range(2)]
        (p1, s1), _ = await h.worker("w1"), await h.worker("w2")
        assert (await h.round()).assigned == 2
        await take_and_work(p1, s1)
        entry = await h.roster("w2")
        assert entry is not None
        job_id, token = entry["assigned_to"]["w2"], entry["job"]["lock_token"]
        entry = {k: v for k, v in entry.items() if k not in ("assigned_to", "job")}
        entry.update(available=True, outcome={"job": job_id, "token": token, "executed": True,
                                              "decision": {"retry_at": START}, "execution": execution})
        await h.db.roster.delete_one({"_id": "w2"})
        await h.db.roster.insert_one(entry)

        with capture_logs() as logs:
            report = await h.round()
            await h.round()

        assert report.applied == 1  # w1's
        said = [e for e in logs if e["event"] == "worker.malformed"]
        assert len(said) == 1
        assert (said[0]["worker_id"], said[0]["reason"].split(";")[0]) == ("w2", reason)
        job = await h.job(job_id)
        assert job is not None
        assert (job["locked"], job["lock_token"], job.get("executions")) == (True, token, [])
        done = [j for j in ids if j != job_id]
        assert [(await h.archived(j) or {}).get("why") for j in done] == ["done"]
        assert len(await h.ledger(event="start")) == 1

    run(db_uri, scenario)


# A worker process's heartbeat document made unreadable for one of its slots (``w2``).
UNREADABLE_BEATS = {
    "slots-an-array": {"slots": [{"id": "w2"}]},
    "slots-a-long-array": {"slots": list(range(20_000))},
    "slots-a-string": {"slots": "w2"},
    "its-slot-a-string": {"slots.w2": "x"},
    "its-slot-naming-no-string": {"slots.w2.id": 7},
    "fresh_until-a-string": {"fresh_until": "tomorrow"},
    "dates-of-other-types": {"fresh_until": [1], "last_seen_at": {"a": 1}},
    "kind-a-number": {"kind": 5},
    "fresh_until-far-ahead": {"fresh_until": datetime(9000, 1, 1, tzinfo=UTC)},
}


@pytest.mark.parametrize("hostile", list(UNREADABLE_BEATS))
def test_a_slot_whose_heartbeat_cannot_be_read_gets_no_work_and_the_cleaner_takes_it_all_away(
        db_uri: str, hostile: str) -> None:
    """Rounds give the slot no work (its liveness is not believed), the jobs run once on the
    other; the cleaner removes both once dead and leaves no heartbeat document behind. On the code
    before the fix, a document whose ``slots`` is an array or whose ``kind`` is not a process's, or
    whose slot of it alone cannot be read, was left for ever (read again at every pass)."""
    async def scenario(h: Harness) -> None:
        ids = [await Record(h.db_uri, n=i).as_job_of(h.producer).enqueue() for i in range(2)]
        workers = [await h.worker("w1"), await h.worker("w2")]
        changed = await h.db.heartbeats.update_one({"ids": "w2"}, {"$set": UNREADABLE_BEATS[hostile]})
        assert changed.modified_count == 1

        ran = []
        for _ in range(2):
            assert (await h.round()).assigned == 1
            for process, slot in workers:
                if await process.poll(slot) is not None:
                    ran.append(slot.id)
                    await take_and_work(process, slot)
        await h.settle()

        assert ran == ["w1", "w1"]
        assert [(await h.archived(j) or {}).get("why") for j in ids] == ["done", "done"]
        assert sorted(d["n"] for d in await h.ledger(event="start")) == [0, 1]
        h.clock.advance(timedelta(seconds=DEAD_AFTER_S * 3))
        cleaner = await h.cleaner()
        assert (await cleaner.fenced_clean()).dead_workers == 2
        await cleaner.fenced_clean()
        assert await h.db.roster.count_documents({}) == 0
        assert await h.db.heartbeats.find({}, {"ids": 1, "kind": 1}).to_list() == []

    run(db_uri, scenario)


# A gate document (``start_gates``) whose ``_id`` is right and whose other fields are hostile.
HOSTILE_GATES = {
    "last-a-string": {"s": [], "last": "granted"},
    "last-an-array": {"s": [], "last": [{"granted": True}]},
    "last-a-forged-grant": {"s": [], "last": {"at": "now", "by": None, "granted": True, "problem": 5}},
    "other-fields": {"s": [], "junk": {"$date": "x"}, "n": float("nan"), "window": -1},
    "another-tenant-hostile": {"s": [], "tenants": {"other": "x", "acme": []}},
    "tenants-an-array": {"s": [], "tenants": [["acme"]]},
}


@pytest.mark.parametrize("hostile", list(HOSTILE_GATES))
def test_a_gate_document_with_hostile_fields_never_lets_more_starts_through_than_its_gate(
        db: Any, db_uri: str, hostile: str) -> None:
    """Four takers, three starts each, against a group gate and a tenant gate: the hostile fields
    are replaced or left aside by the gate's write, every start is granted in time, and no window
    holds more starts than the tighter gate allows."""
    tenant = Gate(GATE.group, "acme", 2, 300)
    db.start_gates.insert_one({"_id": gate_id(GATE.group), **HOSTILE_GATES[hostile]})

    times = asyncio.run(_taken(db_uri, [GATE, tenant], takers=4, each=3))

    assert len(times) == 12
    assert most_in_a_window(times, 0.3) <= 2
    stored = db.start_gates.find_one({"_id": gate_id(GATE.group)})
    assert stored["s"][-1] == stored["tenants"]["acme"][-1] == times[-1]


# A worker's own roster entry (``w2``) with one of the newest fields of a hostile type.
HOSTILE_ENTRIES = {
    "hot-a-long-array": {"hot": list(range(20_000))},
    "hot-a-document": {"hot": {"until": START}},
    "hot-far-ahead": {"hot": datetime(9999, 1, 1, tzinfo=UTC)},
    "lanes-strings": {"lane": "1", "lanes": "9", "runner": 5},
    "lanes-out-of-range": {"lane": -3, "lanes": 10**9, "runner": "w1"},
    "ahead-and-started-odd": {"ahead": {"x": 1}, "started": [1]},
    "release-a-number": {"release": 5},
    "release-a-huge-string": {"release": "0.3.0" + "x" * 1_000_000},
    "release-a-document-of-odd-types": {"release": {"version": {"a": 1}, "works_beside": 3}},
    "assigned_to-an-array": {"available": False, "assigned_to": [1, 2], "job": "x"},
    "job-a-string": {"available": False, "assigned_to": {"w2": ObjectId()}, "job": "x"},
    "job-id-an-array": {"available": False, "assigned_to": {"w2": [1]}, "job": {"_id": [1]}},
}


@pytest.mark.parametrize("hostile", list(HOSTILE_ENTRIES))
def test_an_entry_with_a_hostile_newer_field_costs_the_poller_and_the_rounds_nothing(
        db_uri: str, hostile: str) -> None:
    """The process's poller reads it without raising and is not made to poll fast by it; its slot's
    own read and the rounds go on; every job runs once; the cleaner removes it once dead."""
    async def scenario(h: Harness) -> None:
        ids = [await Record(h.db_uri, n=i).as_job_of(h.producer).enqueue() for i in range(3)]
        workers = [await h.worker("w1"), await h.worker("w2")]
        await h.db.roster.update_one({"_id": "w2"}, {"$set": HOSTILE_ENTRIES[hostile]})
        process, slot = workers[1]
        slot.inbox.waiting = True
        poller = Poller(h.db.roster, process.slots, process.inboxes, h.clock, poll_from_s=0.01, poll_to_s=1.0)

        assert await poller.read_once() in (0, 1)
        assert not poller.hot
        slot.inbox.waiting = False
        for _ in range(3):
            await h.round()
            for p, s in workers:
                if await p.poll(s) is not None:
                    await take_and_work(p, s)
        await h.settle()

        assert [(await h.archived(j) or {}).get("why") for j in ids] == ["done"] * 3
        assert sorted(d["n"] for d in await h.ledger(event="start")) == [0, 1, 2]
        h.clock.advance(timedelta(seconds=DEAD_AFTER_S * 3))
        assert (await (await h.cleaner()).fenced_clean()).dead_workers == 2

    run(db_uri, scenario)


def test_a_wide_fan_in_whose_after_is_an_array_is_left_to_the_sweep_and_the_round_goes_on(db_uri: str) -> None:
    """A dependent stored with edges (recruiter.domain.edges) whose ``after`` became an array of
    one document still matches the edges' dotted filters: on the code before the check, the round
    applying one upstream's outcome raised on it (and every round after, until the sweep). The
    round goes on, leaves it; the sweep archives it as malformed."""
    async def scenario(h: Harness) -> None:
        parts, final = await _fan_in(h)
        held = await h.job(final)
        assert held is not None
        await h.db.scheduled.update_one({"_id": final}, {"$set": {"after": [held["after"]]}})
        await h.db.scheduled.update_one({"_id": parts[0]}, {"$set": {"scheduled_at": START}})  # due now
        beside = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        workers = [await h.worker("w1"), await h.worker("w2")]

        await _both_run(h, workers)

        assert [(await h.archived(j) or {}).get("why") for j in (parts[0], beside)] == ["done", "done"]
        rec = h.recruiter
        assert await rec.lease.acquire()
        assert await rec.dependencies.look(rec.leadership, rec.c, h.clock.now()) == 1
        archived = await h.archived(final)
        assert archived is not None
        assert (archived["why"], archived["reason"]) == ("malformed", "after: not a document")

    run(db_uri, scenario)


@pytest.mark.parametrize("release", [5, "0.3.0" + "x" * 1_000_000, {"version": {"a": 1}, "works_beside": 3},
                                     ["0.3.0"]], ids=["a-number", "a-huge-string", "a-document-of-odd-types",
                                                      "an-array"])
def test_a_release_record_of_a_hostile_type_is_unreadable_wherever_it_is_read(db_uri: str, release: object) -> None:
    """In a lease (``metadata``) and in roster entries: a worker still starts, the leader serves the
    entries (not known, so not held against them), and ``recruiter status`` says so in short lines."""
    async def scenario(h: Harness) -> None:
        await h.db.metadata.insert_one({"_id": "cleaner", "owner": "c:1:x", "epoch": 3,
                                        "expires_at": START + timedelta(hours=1), "release": release})
        await refuse_leaders(h.db)  # a worker starting now: no refusal
        ids = [await Record(h.db_uri, n=i).as_job_of(h.producer).enqueue() for i in range(2)]
        workers = [await h.worker("w1"), await h.worker("w2")]
        await h.db.roster.update_many({}, {"$set": {"release": release}})

        assert (await h.round()).assigned == 2
        for process, slot in workers:
            await take_and_work(process, slot)
        await h.settle()
        assert [(await h.archived(j) or {}).get("why") for j in ids] == ["done", "done"]

        shown = render_status(figures_of(status(h.sync_db, START)), as_json=False)
        releases = [line for line in shown.splitlines() if line.startswith("releases:")]
        assert releases == [f"releases:  {RELEASE} (recruiter lease); "
                            "unreadable (not held against it) (cleaner lease, 2 worker slots)"], shown
        assert max(len(line) for line in shown.splitlines()) < 400

    run(db_uri, scenario)


# What a previous process of a worker id left in its entry, read by the next one's registration.
LEFT_BEHIND = {
    "interval-a-string": ({"heartbeat_interval_s": "x"}, None),
    "interval-an-array": ({"heartbeat_interval_s": [1]}, None),
    "interval-infinite": ({"heartbeat_interval_s": float("inf")}, None),
    "outcome-a-string": ({"outcome": "done"}, "outcome: expected an embedded document, got str"),
    "outcome-missing-its-token": ({"outcome": {"job": ObjectId(), "executed": True, "decision": {"archive": "done"}}},
                                  "outcome.token: missing"),
}


@pytest.mark.parametrize("left", list(LEFT_BEHIND))
def test_a_worker_registers_over_a_hostile_entry_its_id_left_and_gets_work(db_uri: str, left: str) -> None:
    """On the code before the check, the registration raised (ValueError, TypeError, OverflowError,
    AttributeError: the worker did not start), or kept a malformed outcome in the new entry, which
    every round then skipped: a live worker given no work."""
    fields, dropped = LEFT_BEHIND[left]

    async def scenario(h: Harness) -> None:
        await h.db.roster.insert_one({"_id": "w1", "session": ObjectId(), "available": True, "work_on": ["*"],
                                      "hostname": "elsewhere", "pid": 1, "last_seen_at": START - timedelta(hours=1),
                                      **fields})
        job = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()

        with capture_logs() as logs:
            process, slot = await h.worker("w1")

        said = [e["reason"] for e in logs if e["event"] == "worker.malformed_outcome_dropped"]
        assert said == ([] if dropped is None else [dropped])
        assert "outcome" not in (await h.roster("w1") or {})
        assert (await h.round()).assigned == 1
        await take_and_work(process, slot)
        await h.settle()
        assert (await h.archived(job) or {}).get("why") == "done"

    run(db_uri, scenario)


def test_the_job_a_dropped_outcome_names_is_rescued_and_runs_once(db_uri: str) -> None:
    """A previous process of the id, handed a job, left a malformed outcome for it: the next
    registration drops the outcome, gives the job back (as the previous process's beats tell), and it
    runs once. On the code before the check, the registration kept the outcome and left the job locked."""
    async def scenario(h: Harness) -> None:
        job = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        await h.worker("w1")
        assert (await h.round()).assigned == 1
        await h.db.roster.update_one({"_id": "w1"}, {"$set": {"outcome": {"job": job, "decision": 5}}})
        h.clock.advance(timedelta(hours=1))  # the previous process is long silent

        process, slot = await h.worker("w1")
        rescued = await h.job(job)
        assert rescued is not None
        assert rescued["locked"] is False  # never started (its beats say so): given back, no crash counted
        await h.settle()
        await take_and_work(process, slot)
        await h.settle()

        assert (await h.archived(job) or {}).get("why") == "done"
        assert len(await h.ledger(event="start")) == 1

    run(db_uri, scenario)
