"""recruiter.domain.waiting: why a job is not running, one reason, in the order a round meets them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from bson import ObjectId

from recruiter.domain.waiting import (
    Ahead,
    Around,
    HeldBy,
    Waiting,
    WorkerFact,
    ahead_filters,
    explain,
    needs_around,
    takes,
    worker_fact,
)

NOW = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
JOB_ID = ObjectId()


def job(**fields: Any) -> dict[str, Any]:
    return {"_id": JOB_ID, "group": "mail", "tenant": "acme", "status": "queued", "locked": False,
            "priority": "low", "scheduled_at": NOW - timedelta(seconds=5), "attempts": 0, **fields}


def worker(wid: str = "w1", groups: tuple[str, ...] = ("mail",), *, live: bool = True, available: bool = False,
           process: str = "p1") -> WorkerFact:
    return WorkerFact(wid, groups, live=live, available=available, process=process, last_seen=NOW)


def code(doc: dict[str, Any], around: Around | None = None, **kw: Any) -> Waiting:
    found = explain(JOB_ID, doc, None, NOW, around=around, **kw)
    assert found is not None
    return found.code


def test_unknown_job_is_none_and_archived_says_why() -> None:
    assert explain(JOB_ID, None, None, NOW) is None
    found = explain(JOB_ID, None, {"why": "tried-too-many-times", "reason": "boom", "archived_at": NOW}, NOW)
    assert found is not None
    assert found.code == Waiting.ARCHIVED
    assert not found.waiting
    # jobs explain prints "code: text": the text starts with how it ended, not "archived" again.
    assert found.text.startswith("tried-too-many-times (boom) at ")


def test_not_due_first_attempt_is_due_later_with_time_and_delay() -> None:
    found = explain(JOB_ID, job(scheduled_at=NOW + timedelta(minutes=5)), None, NOW)
    assert found is not None
    assert found.code == Waiting.DUE_LATER
    assert found.text == "due later: at 2026-11-27 03:05:00 UTC (in 5m)"


def test_retrying_names_the_failed_attempt_and_the_backoff() -> None:
    doc = job(status="retrying", attempts=2, scheduled_at=NOW + timedelta(seconds=30),
              last_execution={"attempt": 2, "outcome": "failed", "class": "ValueError", "message": "bad"})
    found = explain(JOB_ID, doc, None, NOW)
    assert found is not None
    assert found.code == Waiting.RETRYING
    assert found.text == "retrying: attempt 2 failed (ValueError: bad); backoff until 2026-11-27 03:00:30 UTC (in 30s)"


def test_a_job_given_back_by_a_worker_that_refused_it_says_so() -> None:
    doc = job(status="retrying", scheduled_at=NOW + timedelta(seconds=2),
              refusals=[{"process": "p1", "worker": "w1", "reason": "no module billing", "at": NOW}],
              refusals_until=NOW + timedelta(hours=1))
    found = explain(JOB_ID, doc, None, NOW)
    assert found is not None
    assert found.code == Waiting.REFUSED
    assert found.text.startswith("refused by worker w1: no module billing; kept from them until "
                                 "2026-11-27 04:00:00 UTC (a refusal after that archives it unrunnable); to fix: ")
    assert "--import-path" in found.text
    # Past refusals_until it is still the refusal it waits for (the next one archives it).
    late = explain(JOB_ID, {**doc, "refusals_until": NOW - timedelta(seconds=1)}, None, NOW)
    assert late is not None
    assert late.code == Waiting.REFUSED
    # Run since and failed: an ordinary retry.
    ran = {**doc, "last_execution": {"attempt": 1, "outcome": "failed", "class": "ValueError", "message": "bad",
                                     "ended_at": NOW + timedelta(seconds=1)}}
    assert code(ran) == Waiting.RETRYING
    assert found.details["refused_by"] == ["w1"]
    assert found.details["refused_until"] == NOW + timedelta(hours=1)


def test_a_refusal_says_why_and_the_fix_the_worker_gave() -> None:
    refusal = {"process": "p1", "worker": "w1", "at": NOW, "kind": "not-allowed", "class": "billing:Send",
               "reason": "class not allowed: billing:Send (module 'billing' is not in the worker's allowed modules: "
                         "logs)", "fix": "allow the module on the worker: --allow-module billing"}
    doc = job(refusals=[refusal], refusals_until=NOW + timedelta(hours=1))
    found = explain(JOB_ID, doc, None, NOW, around=Around(workers=(worker(),), ahead=Ahead(0)))
    assert found is not None
    assert found.code == Waiting.REFUSED
    assert found.text == ("refused by every live worker of its group mail until 2026-11-27 04:00:00 UTC (in 1h) "
                          "(newest: worker w1): class not allowed: billing:Send (module 'billing' is not in the "
                          "worker's allowed modules: logs); to fix: allow the module on the worker: "
                          "--allow-module billing")
    assert found.details["refusal_kind"] == "not-allowed"


def test_due_jobs_in_the_order_a_round_meets_the_reasons() -> None:
    live = (worker(),)
    paused = Around(paused_groups=frozenset({"mail"}), paused_tenants=frozenset({"acme"}), workers=live)
    assert code(job(), paused) == Waiting.GROUP_PAUSED
    assert code(job(), Around(paused_tenants=frozenset({"acme"}), workers=live)) == Waiting.TENANT_PAUSED
    assert code(job(tenant=None), Around(paused_tenants=frozenset({"acme"}), workers=live,
                                         ahead=Ahead(0))) == Waiting.NEXT
    assert code(job(), Around()) == Waiting.NO_WORKER
    assert code(job(), Around(workers=(worker(live=False),))) == Waiting.NO_WORKER
    assert code(job(), Around(workers=(worker(groups=("other",)),))) == Waiting.NO_WORKER
    limit = HeldBy("tenant:acme", "tenant acme runs 5 jobs at most; 5 running")
    held = explain(JOB_ID, job(), None, NOW, around=Around(workers=live, ahead=Ahead(3), held_by=limit))
    assert held is not None
    assert held.code == Waiting.HELD_BY_LIMIT
    assert "5 running" in held.text
    behind = explain(JOB_ID, job(), None, NOW, around=Around(workers=live, ahead=Ahead(3)))
    assert behind is not None
    assert behind.code == Waiting.BEHIND
    assert behind.text.startswith("behind 3 ready job(s) of its tenant in group mail, tenant acme")
    capped = explain(JOB_ID, job(), None, NOW, around=Around(workers=live, ahead=Ahead(1000, capped=True)))
    assert capped is not None
    assert "behind at least 1000" in capped.text
    assert code(job(), Around(workers=(worker(groups=("*",)),), ahead=Ahead(0))) == Waiting.NEXT


def test_a_job_refused_by_every_live_worker_of_its_group() -> None:
    doc = job(refusals=[{"process": "p1", "worker": "w1", "reason": "x", "at": NOW}],
              refusals_until=NOW + timedelta(hours=1))
    assert code(doc, Around(workers=(worker(),), ahead=Ahead(0))) == Waiting.REFUSED
    assert code(doc, Around(workers=(worker(), worker("w2", process="p2")), ahead=Ahead(0))) == Waiting.NEXT
    over = {**doc, "refusals_until": NOW - timedelta(seconds=1)}  # no longer kept from anyone
    assert code(over, Around(workers=(worker(),), ahead=Ahead(0))) == Waiting.NEXT


def test_a_job_aimed_at_a_worker_that_is_gone_or_silent() -> None:
    doc = job(group="@worker:billing-1", on_worker={"worker": "billing-1", "group": "mail"})
    gone = explain(JOB_ID, doc, None, NOW, around=Around(workers=(worker(groups=("*",)),)))
    assert gone is not None
    assert gone.code == Waiting.WORKER_GONE
    assert "billing-1" in gone.text
    assert "not in the roster" in gone.text
    silent = worker("billing-1", ("mail", "@worker:billing-1"), live=False)
    late = explain(JOB_ID, doc, None, NOW, around=Around(workers=(silent,)))
    assert late is not None
    assert late.code == Waiting.WORKER_GONE
    assert "heartbeat is late" in late.text
    there = worker("billing-1", ("mail", "@worker:billing-1"))
    assert code(doc, Around(workers=(there,), ahead=Ahead(0))) == Waiting.NEXT
    # Pausing the declared group does not pause a job aimed at a worker.
    assert code(doc, Around(paused_groups=frozenset({"mail"}), workers=(there,), ahead=Ahead(2))) == Waiting.BEHIND


def test_locked_jobs_running_assigned_or_on_a_late_heartbeat() -> None:
    token = ObjectId()
    doc = job(locked=True, status="assigned", locked_by="w1", lock_token=token, locked_at=NOW)
    beat = {"working_on": JOB_ID, "working_token": token, "working_since": NOW}
    assert code(doc, holder=worker(), beat=beat) == Waiting.RUNNING
    assert code(doc, holder=worker(), beat={"working_on": None}) == Waiting.ASSIGNED
    late = explain(JOB_ID, doc, None, NOW, holder=worker(live=False), beat=beat)
    assert late is not None
    assert late.code == Waiting.HEARTBEAT_LATE
    assert late.waiting
    assert "heartbeat is late" in late.text
    assert "it was running the job" in late.text
    assert code(doc, holder=None, beat=None) == Waiting.HEARTBEAT_LATE


def test_untrusted_documents_never_raise() -> None:
    for bad in (job(group=5), job(scheduled_at="soon"), job(priority=["high"]), job(status="odd"),
                job(tenant={"$gt": ""})):
        assert code(bad, Around()) == Waiting.MALFORMED
        assert not needs_around(bad, NOW)
    odd = job(status="retrying", scheduled_at=NOW + timedelta(seconds=1), refusals=[7], last_execution="x",
              refusals_until=NOW + timedelta(hours=1))
    refusals = [{"process": "p1"}]
    assert code(odd) == Waiting.RETRYING  # no refusal that names a process: a plain retry
    assert code({**odd, "refusals": "x"}) == Waiting.RETRYING
    assert code({**odd, "refusals": [7, {"process": "p1"}]}) == Waiting.REFUSED
    assert code({**odd, "refusals": refusals, "refusals_until": "x"}) == Waiting.REFUSED
    malformed = explain(JOB_ID, {**odd, "refusals": refusals}, None, NOW)
    assert malformed is not None
    assert "malformed refusal: reason is NoneType, not text" in malformed.text
    assert code(job(locked=True, locked_by=None), holder=None) == Waiting.HEARTBEAT_LATE
    fact = worker_fact({"_id": "w9", "work_on": "mail", "session": 1}, {"session": 2}, NOW)
    assert fact.groups == ()
    assert not fact.live


def test_ahead_ranges_follow_the_candidates_index_order() -> None:
    doc = job()
    ranges = ahead_filters(doc, NOW)
    base = {"locked": False, "group": "mail", "tenant": "acme"}
    assert ranges == [
        {**base, "status": "retrying", "priority": "high", "scheduled_at": {"$lte": NOW}},
        {**base, "status": "retrying", "priority": "low", "scheduled_at": {"$lte": NOW}},
        {**base, "status": "queued", "priority": "high", "scheduled_at": {"$lte": NOW}},
        {**base, "status": "queued", "priority": "low", "scheduled_at": {"$lt": doc["scheduled_at"]}},
        {**base, "status": "queued", "priority": "low", "scheduled_at": doc["scheduled_at"], "_id": {"$lt": JOB_ID}},
    ]
    retrying_high = ahead_filters(job(status="retrying", priority="high"), NOW)
    assert [r["status"] for r in retrying_high] == ["retrying", "retrying"]
    assert all(r["priority"] == "high" for r in retrying_high)


def test_takes_follows_the_selection_rule() -> None:
    assert takes(worker(groups=("*",)), "mail")
    assert not takes(worker(groups=("*",)), "@worker:b")
    assert takes(worker(groups=("@worker:b",)), "@worker:b")
