"""Outcomes as values and the pure document changes they cause."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import ObjectId

from recruiter.domain.attempt import cut_marker
from recruiter.domain.job import MAX_EXECUTIONS_KEPT, JobOptions, Status, build_job_document
from recruiter.domain.outcome import (
    CRASHED_TOO_MANY_TIMES,
    DETAILED_EXECUTIONS_KEPT,
    DONE,
    LOCK_FIELDS,
    ROLLBACK_PIPELINE,
    Execution,
    Outcome,
    archived_document,
    crash_update,
    decision_to_document,
    held_by,
    history,
    history_entry,
    is_archive,
    reschedule_update,
    without_details,
)
from recruiter.domain.retry import Archive, MoveToGroup, RetryAt
from recruiter.domain.workable import Workable

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
NOW = T0 + timedelta(minutes=5)


class Job(Workable):
    def __init__(self, n: int) -> None:
        self.n = n

    def execute(self) -> None:
        pass


def locked_job(attempts: int = 1, executions: int = 0, **extra: Any) -> dict[str, Any]:
    """A ``scheduled`` document as the recruiter leaves it after locking it for worker w1."""
    doc = build_job_document(Job(1), JobOptions(group="g"), T0)
    doc.update(
        locked=True,
        locked_by="w1",
        locked_at=T0 + timedelta(seconds=1),
        lock_token=ObjectId(),
        lock_epoch=3,
        status=Status.ASSIGNED.value,
        attempts=attempts,
        executions=[{"attempt": i + 1, "outcome": "failed"} for i in range(executions)],
        **extra,
    )
    return doc


def execution(attempt: int = 1, kind: Any = "done", error: bool = False) -> Execution:
    return Execution(
        attempt=attempt,
        kind=kind,
        worker="w1",
        pid=1234,
        hostname="host-a",
        scheduled_at=T0,
        started_at=NOW - timedelta(seconds=2),
        ended_at=NOW,
        error_class="builtins:ValueError" if error else None,
        message="boom" if error else None,
        trace="Traceback..." if error else None,
    )


def outcome_doc(job: dict[str, Any], decision: Any, *, executed: bool = True, result: Any = None,
                ex: Execution | None = None, token: ObjectId | None = None) -> dict[str, Any]:
    return Outcome(
        job_id=job["_id"],
        token=token or job["lock_token"],
        attempt=job["attempts"],
        executed=executed,
        decision=decision,
        execution=ex if ex is not None else (execution(job["attempts"]) if executed else None),
        result=result,
    ).to_document()


# -- value documents --------------------------------------------------------------------


def test_execution_document() -> None:
    ok = execution().to_document()
    assert ok == {
        "attempt": 1,
        "outcome": "done",
        "scheduled_at": T0,
        "assigned_at": None,
        "started_at": NOW - timedelta(seconds=2),
        "ended_at": NOW,
        "worker": "w1",
        "pid": 1234,
        "hostname": "host-a",
        "crashed": False,
    }
    failed = execution(kind="failed", error=True).to_document()
    assert (failed["class"], failed["message"], failed["trace"]) == ("builtins:ValueError", "boom", "Traceback...")
    assert failed["crashed"] is False
    assert execution(kind="crashed").to_document()["crashed"] is True


def test_decision_documents() -> None:
    assert decision_to_document(Archive("done")) == {"archive": "done"}
    assert decision_to_document(RetryAt(NOW)) == {"retry_at": NOW}
    assert decision_to_document(MoveToGroup("slow", NOW)) == {"retry_at": NOW, "group": "slow"}
    with pytest.raises(TypeError, match="not a retry decision"):
        decision_to_document("later")  # type: ignore[arg-type]


def test_outcome_document() -> None:
    job = locked_job()
    doc = outcome_doc(job, Archive(DONE), result={"n": 1})
    assert doc["job"] == job["_id"]
    assert doc["token"] == job["lock_token"]
    assert doc["attempt"] == 1
    assert doc["executed"] is True
    assert doc["decision"] == {"archive": "done"}
    assert doc["execution"]["worker"] == "w1"
    assert doc["result"] == {"n": 1}
    assert is_archive(doc)
    assert not is_archive(outcome_doc(job, RetryAt(NOW)))
    judged = outcome_doc(job, Archive(CRASHED_TOO_MANY_TIMES), executed=False)
    assert judged["execution"] is None


def test_held_by_checks_the_lock_token() -> None:
    job = locked_job()
    assert held_by(job, outcome_doc(job, Archive(DONE)))
    assert not held_by(job, outcome_doc(job, Archive(DONE), token=ObjectId()))
    assert not held_by(None, outcome_doc(job, Archive(DONE)))
    unlocked = {**job, "locked": False}
    assert not held_by(unlocked, outcome_doc(job, Archive(DONE)))


# -- archiving ----------------------------------------------------------------------------


def test_archived_document_of_a_done_job() -> None:
    job = locked_job(crash_pending=True)
    out = outcome_doc(job, Archive(DONE), result=[1, 2])
    archived = archived_document(job, out, NOW)

    assert archived["why"] == "done"
    assert archived["done"] is True
    assert archived["locked"] is False
    assert archived["archived_at"] == NOW
    for f in (*LOCK_FIELDS, "status", "crash_pending"):
        assert f not in archived
    assert archived["attempts"] == 1
    assert archived["last_execution"] == out["execution"]
    assert archived["executions"] == [history_entry(out["execution"])]
    assert archived["result"] == [1, 2]
    # The rest of the job is copied as it was.
    for f in ("_id", "created_at", "scheduled_at", "group", "workable", "retry_policy", "tags", "tenant"):
        assert archived[f] == job[f]


def test_archived_document_does_not_change_the_job() -> None:
    job = locked_job(executions=2)
    before = {k: (list(v) if isinstance(v, list) else v) for k, v in job.items()}
    archived_document(job, outcome_doc(job, Archive(DONE)), NOW)
    assert job == before


def test_archived_document_of_a_failure_is_not_done() -> None:
    job = locked_job(attempts=3)
    archived = archived_document(job, outcome_doc(job, Archive("tried-too-many-times")), NOW)
    assert archived["why"] == "tried-too-many-times"
    assert archived["done"] is False
    assert archived["attempts"] == 3
    assert "result" not in archived


def test_archived_executions_are_bounded() -> None:
    job = locked_job(attempts=MAX_EXECUTIONS_KEPT + 5, executions=MAX_EXECUTIONS_KEPT + 4)
    out = outcome_doc(job, Archive("tried-too-many-times"))
    archived = archived_document(job, out, NOW)
    assert len(archived["executions"]) == MAX_EXECUTIONS_KEPT
    assert archived["executions"][-1] == history_entry(out["execution"])  # the newest is kept
    assert archived["executions"][0] == {"attempt": 6, "outcome": "failed"}  # the oldest are dropped


def test_attempt_is_given_back_when_not_executed() -> None:
    job = locked_job(attempts=3, crash_pending=True, last_execution={"crashed": True, "attempt": 2})
    out = outcome_doc(job, Archive(CRASHED_TOO_MANY_TIMES), executed=False)
    archived = archived_document(job, out, NOW)
    assert archived["attempts"] == 2
    assert archived["why"] == CRASHED_TOO_MANY_TIMES
    assert archived["done"] is False
    assert archived["last_execution"] == {"crashed": True, "attempt": 2}  # kept: the crash
    assert archived["executions"] == []
    assert "crash_pending" not in archived


def test_given_back_attempts_never_go_negative() -> None:
    job = locked_job(attempts=0)
    archived = archived_document(job, outcome_doc(job, Archive("cancelled"), executed=False), NOW)
    assert archived["attempts"] == 0


def test_falsy_results_are_kept_but_none_is_not() -> None:
    job = locked_job()
    assert archived_document(job, outcome_doc(job, Archive(DONE), result=0), NOW)["result"] == 0
    assert "result" not in archived_document(job, outcome_doc(job, Archive(DONE), result=None), NOW)


# -- rescheduling ------------------------------------------------------------------------


def test_reschedule_update_after_a_failure() -> None:
    job = locked_job(attempts=2)
    retry_at = NOW + timedelta(seconds=30)
    out = outcome_doc(job, RetryAt(retry_at), ex=execution(2, "failed", error=True))
    filter_, update = reschedule_update(job, out)

    # A job resubmitted after the round read it is not matched (it is read again and resubmitted).
    assert filter_ == {"_id": job["_id"], "lock_token": job["lock_token"], "resubmit": {"$exists": False}}
    assert update["$set"] == {
        "locked": False,
        "status": "retrying",
        "scheduled_at": retry_at,
        "last_execution": out["execution"],
        # The whole history (the job read is the one under the filter's lock), the newest last,
        # with its trace: the newest DETAILED_EXECUTIONS_KEPT keep theirs.
        "executions": [*job["executions"], out["execution"]],
    }
    assert set(update["$unset"]) == {*LOCK_FIELDS, "crash_pending"}
    assert "$push" not in update
    assert "trace" in out["execution"]
    assert update["$set"]["executions"][-1]["trace"] == out["execution"]["trace"]
    assert "$inc" not in update  # the attempt counted when the job was locked stands


def test_reschedule_update_gives_back_an_attempt_not_executed() -> None:
    job = locked_job(attempts=2, crash_pending=True)
    retry_at = NOW + timedelta(minutes=1)
    filter_, update = reschedule_update(job, outcome_doc(job, RetryAt(retry_at), executed=False))
    assert filter_["lock_token"] == job["lock_token"]
    assert update["$inc"] == {"attempts": -1}
    assert "$push" not in update
    assert "last_execution" not in update["$set"]
    assert update["$set"]["scheduled_at"] == retry_at
    assert "crash_pending" in update["$unset"]


def test_reschedule_update_moves_group() -> None:
    job = locked_job()
    at = NOW + timedelta(seconds=5)
    _, update = reschedule_update(job, outcome_doc(job, MoveToGroup("slow", at)))
    assert update["$set"]["group"] == "slow"
    assert update["$set"]["scheduled_at"] == at
    _, plain = reschedule_update(job, outcome_doc(job, RetryAt(at)))
    assert "group" not in plain["$set"]


def test_update_operators_touch_disjoint_fields() -> None:
    # MongoDB refuses an update in which two operators name the same path.
    job = locked_job(crash_pending=True)
    for update in (
        reschedule_update(job, outcome_doc(job, MoveToGroup("x", NOW)))[1],
        reschedule_update(job, outcome_doc(job, RetryAt(NOW), executed=False))[1],
        crash_update(job, None, NOW, "dead")[1],
    ):
        paths = [p for op in update.values() for p in op]
        assert len(paths) == len(set(paths)), update


# -- crashes ------------------------------------------------------------------------------


def test_crash_update() -> None:
    job = locked_job(attempts=2)
    worker = {"_id": "w1", "pid": 77, "hostname": "host-b", "working_since": T0 + timedelta(seconds=2)}
    filter_, update = crash_update(job, worker, NOW, "worker w1 stopped heartbeating")

    assert filter_ == {"_id": job["_id"], "lock_token": job["lock_token"], "locked": True}
    s = update["$set"]
    assert s["locked"] is False
    assert s["status"] == "retrying"
    assert s["scheduled_at"] == NOW  # due at once, to be judged by the next worker
    assert s["crash_pending"] is True
    ex = s["last_execution"]
    assert ex["crashed"] is True
    assert ex["outcome"] == "crashed"
    assert ex["attempt"] == 2
    assert (ex["worker"], ex["pid"], ex["hostname"]) == ("w1", 77, "host-b")
    assert ex["started_at"] == T0 + timedelta(seconds=2)
    assert ex["assigned_at"] == job["locked_at"]
    assert ex["ended_at"] == NOW
    assert ex["class"] == "recruiter.retry:WorkerCrashed"
    assert ex["message"] == "worker w1 stopped heartbeating"
    assert set(update["$unset"]) == set(LOCK_FIELDS)
    assert update["$inc"] == {"crashes": 1}
    assert update["$push"] == {"executions": {"$each": [history_entry(ex)], "$slice": -MAX_EXECUTIONS_KEPT}}


def test_crash_update_without_worker_document() -> None:
    job = locked_job()
    _, update = crash_update(job, None, NOW, "its worker left the roster")
    ex = update["$set"]["last_execution"]
    assert ex["worker"] == "w1"
    assert ex["pid"] is None
    assert ex["hostname"] is None
    assert ex["started_at"] == job["locked_at"]


def test_rollback_pipeline_gives_back_the_attempt() -> None:
    (set_stage, unset_stage) = ROLLBACK_PIPELINE
    assert set_stage["$set"]["locked"] is False
    assert set_stage["$set"]["attempts"] == {"$max": [0, {"$subtract": ["$attempts", 1]}]}
    assert set(unset_stage["$unset"]) == set(LOCK_FIELDS)


# -- traces and logs in the history --------------------------------------------------------------


def detailed(attempt: int) -> dict[str, Any]:
    return {"attempt": attempt, "outcome": "failed", "class": "builtins:ValueError", "message": f"m{attempt}",
            "trace": f"t{attempt}", "logs": f"l{attempt}\n", "logs_cut": attempt}


def test_the_newest_executions_keep_their_trace_and_logs_and_older_ones_say_they_lost_them() -> None:
    job = locked_job(attempts=9)
    job["executions"] = [detailed(i) for i in range(1, 9)]
    ex = {**detailed(9), "logs_cut": 0}
    out = {**outcome_doc(job, Archive("tried-too-many-times")), "execution": ex}
    kept = archived_document(job, out, NOW)["executions"]
    assert [e["attempt"] for e in kept] == list(range(1, 10))
    old, new = kept[:-DETAILED_EXECUTIONS_KEPT], kept[-DETAILED_EXECUTIONS_KEPT:]
    for e in old:
        assert e == {"attempt": e["attempt"], "outcome": "failed", "class": "builtins:ValueError",
                     "message": f"m{e['attempt']}", "details_dropped": True}
    assert new == [detailed(i) for i in range(5, 9)] + [ex]
    # Rescheduling keeps the same history as archiving would.
    _, update = reschedule_update(job, {**out, "decision": {"retry_at": NOW}})
    assert update["$set"]["executions"] == kept


def test_history_keeps_entries_without_details_and_malformed_ones_as_they_are() -> None:
    entries: list[object] = [{"attempt": 1, "outcome": "crashed"}, "junk", {"attempt": 2, "trace": None}]
    entries += [detailed(i) for i in range(3, 3 + DETAILED_EXECUTIONS_KEPT)]
    assert history({"executions": entries}, None) == entries[:3] + entries[3:]
    assert without_details({"attempt": 2, "logs": ""}) == {"attempt": 2, "logs": ""}  # nothing to drop


def test_an_execution_stores_its_logs_only_when_there_are_some() -> None:
    assert "logs" not in execution().to_document()
    doc = replace(execution(), logs="2026 INFO x\n", logs_cut=12).to_document()
    assert (doc["logs"], doc["logs_cut"]) == ("2026 INFO x\n", 12)
    assert cut_marker(doc["logs_cut"]) == "[… 12 bytes cut …]"
    assert cut_marker(0) == cut_marker(None) == cut_marker("12") == cut_marker(True) == ""
