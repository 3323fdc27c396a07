"""Dead workers, with the real CLI: no job waits for a dead worker or is archived without running.

A SIGKILLed worker keeps its roster entry until the cleaner's
``--considered-dead-after``; these tests set that long on purpose, so what they
show comes from the heartbeats (recruiter.liveness): a silent entry is given no
work, and a job handed to it just before it died goes back at once, counting
no attempt.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest

from recruiter import Recruiter
from tests.conftest import long_or_short, wait_for
from tests.processes.conftest import Proc, Processes
from tests.workables import Record

LONG_DEAD_AFTER = ["--considered-dead-after", "60s"]


def registered(db: Any, worker_id: str) -> Any:
    return wait_for(lambda: db.roster.find_one({"_id": worker_id, "available": True})
                    and db.heartbeats.find_one({"ids": worker_id}),  # its process's heartbeat names it
                    timeout_s=60, message=f"worker {worker_id} registered")


@pytest.mark.parametrize("enqueued", ["right-after-the-kill", "once-its-heartbeat-is-stale"])
def test_a_job_enqueued_after_an_idle_worker_is_killed_runs_on_a_live_one_within_seconds(
        processes: Processes, db: Any, db_uri: str, enqueued: str) -> None:
    processes.recruiter()
    processes.cleaner(*LONG_DEAD_AFTER)
    # The doomed worker registers first, so it is the one free the longest: the
    # recruiter's first choice for the next job.
    doomed = processes.worker("--id", "doomed")
    registered(db, "doomed")
    processes.worker("--id", "alive")
    registered(db, "alive")
    doomed.signal(signal.SIGKILL)
    doomed.wait(10)
    if enqueued == "once-its-heartbeat-is-stale":
        wait_for(lambda: db.heartbeats.find_one({"ids": "doomed"})["fresh_until"] < datetime.now(UTC),
                 timeout_s=10, message="the killed worker's heartbeat to go stale")
    with Recruiter.connect(db_uri) as rec:
        job_id = rec.enqueue(Record(db_uri, n=1))
    sent = time.monotonic()
    doc = wait_for(lambda: db.archived.find_one({"_id": job_id}), timeout_s=10, message="the job archived")
    print(f"\nliveness: archived {time.monotonic() - sent:.2f}s after the enqueue ({enqueued})")
    assert doc["why"] == "done"
    assert doc["attempts"] == 1
    assert doc.get("crashes", 0) == 0
    assert [(e["outcome"], e["worker"]) for e in doc["executions"]] == [("done", "alive")]
    assert [e["worker"] for e in db.ledger.find({"job": str(job_id), "event": "start"})] == ["alive"]
    assert db.roster.find_one({"_id": "doomed", "available": False}) is None, "nothing waits on the dead worker"


WORKERS_AT_ONCE = 8
WAVES = 10
KILLED_PER_WAVE = 4  # 40 worker processes killed in all
# Every size runs the 40 kills while jobs wait; the long tier (RECRUITER_LONG_TESTS=1)
# works through 2 000 jobs, 60 archived between waves; CI through 600, 30 between waves.
JOBS = int(long_or_short("RECRUITER_CHURN_JOBS", 600, 2000))
PER_WAVE = int(long_or_short("RECRUITER_CHURN_PER_WAVE", 30, 60))


@pytest.mark.timeout(1500)
def test_worker_churn_loses_no_job_and_archives_none_without_running_it(
        processes: Processes, db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        ids = rec.enqueue_many(Record(db_uri, n=i, sleep_s=0.05 * (i % 2)) for i in range(JOBS))
    # A longer lease than the fast default: on a loaded machine a round over a
    # 2 000-job backlog can outlast two seconds (the churn is not about leases).
    processes.recruiter("--lease-ttl", "15s")
    processes.cleaner(*LONG_DEAD_AFTER)
    started = 0

    def worker() -> Proc:
        nonlocal started
        started += 1
        return processes.worker("--id", f"churn-{started:02d}", "--concurrency", "2")

    live = [worker() for _ in range(WORKERS_AT_ONCE)]
    began = time.monotonic()
    wait_for(lambda: db.archived.count_documents({}) >= 50, timeout_s=120, message="jobs flowing")
    killed = 0
    for wave in range(WAVES):
        # SIGKILL a few at once, busy or idle, and start as many fresh ones.
        for proc in live[:KILLED_PER_WAVE]:
            proc.signal(signal.SIGKILL)
            proc.wait(10)
            killed += 1
        live = live[KILLED_PER_WAVE:] + [worker() for _ in range(KILLED_PER_WAVE)]
        done = db.archived.count_documents({})
        print(f"churn: wave {wave + 1}/{WAVES}: {killed} workers killed, {done}/{JOBS} archived, "
              f"{db.scheduled.count_documents({'locked': True})} assigned, {time.monotonic() - began:.0f}s")
        wait_for(lambda d=done: db.archived.count_documents({}) >= min(JOBS, d + PER_WAVE), timeout_s=120,
                 message="jobs flowing after the wave")

    def drained() -> bool:
        n = db.archived.count_documents({})
        if int(time.monotonic() - began) % 15 == 0:
            print(f"churn: {n}/{JOBS} archived, {time.monotonic() - began:.0f}s")
        return n == JOBS

    wait_for(drained, timeout_s=600, interval_s=1.0, message="every job archived")
    elapsed = time.monotonic() - began
    archived = {d["_id"]: d for d in db.archived.find({}, {"why": 1, "attempts": 1, "crashes": 1,
                                                          "unproven_returns": 1, "executions.outcome": 1})}
    assert set(archived) == set(ids)
    starts = Counter(e["job"] for e in db.ledger.find({"event": "start"}, {"job": 1}))
    never_ran = [str(i) for i in ids if starts[str(i)] == 0]
    assert not never_ran, f"archived without having started: {never_ran[:10]}"
    whys = Counter(d["why"] for d in archived.values())
    assert whys == {"done": JOBS}, f"not all done: {dict(whys)}"
    assert all(d["executions"][-1]["outcome"] == "done" for d in archived.values())
    returns = sum(d.get("unproven_returns", 0) for d in archived.values())
    crashes = sum(d.get("crashes", 0) for d in archived.values())
    print(f"churn: {JOBS} jobs archived done in {elapsed:.0f}s with {killed} workers killed; "
          f"{sum(starts.values())} executions, {crashes} crashes, {returns} returns of jobs never shown started")
