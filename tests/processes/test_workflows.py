"""Chains and fan-in with the real CLI processes (issue 42): each job runs once its dependencies
are archived, and ends exactly once, though a worker is SIGKILLed holding a step."""

from __future__ import annotations

import signal
from typing import Any

from recruiter import Recruiter, chain, fan_in
from tests.conftest import wait_for
from tests.flow_workables import ReadsResults, Step, Sum
from tests.processes.conftest import Processes
from tests.workables import AlwaysFails


def test_a_chain_and_a_fan_in_run_in_order_once_each_though_a_worker_dies_holding_a_step(
        processes: Processes, db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        steps = rec.enqueue_many(chain(rec, Step(db_uri, n=1), Step(db_uri, n=2, sleep_s=120), Step(db_uri, n=3)))
        fan = rec.enqueue_many(fan_in(rec, [Step(db_uri, n=10 * i) for i in (1, 2, 3)], Sum(db_uri)))
    order = {str(j): k for k, j in enumerate([*steps, *fan])}
    processes.recruiter()
    processes.cleaner()
    first = processes.worker("--id", "first")
    wait_for(lambda: db.ledger.find_one({"job": str(steps[1]), "event": "start"}),
             timeout_s=60, message="the chain's slow step started (on the only worker)")
    processes.worker("--id", "second", "--concurrency", "2")
    first.signal(signal.SIGKILL)  # holding step 2: the cleaner gives it back, it runs again

    wait_for(lambda: db.archived.count_documents({}) == 7, timeout_s=90, message="every job archived")
    assert {d["_id"]: d["why"] for d in db.archived.find()} == {j: "done" for j in [*steps, *fan]}
    ends = list(db.ledger.find({"event": "end"}).sort("at", 1))
    assert sorted(order[e["job"]] for e in ends) == list(range(7))  # each ended exactly once
    ended_at = {e["job"]: e["at"] for e in ends}
    starts = list(db.ledger.find({"event": "start"}))
    for s in starts:
        for dep in s["after"]:
            assert ended_at[dep] <= s["at"], f"{s['job']} started before {dep} ended"
    assert [s["after"] for s in starts if s["job"] == str(fan[-1])] == [[str(j) for j in fan[:-1]]]
    assert next(s for s in starts if s["job"] == str(fan[-1]))["total"] == 60
    assert len([s for s in starts if s["job"] == str(steps[1])]) == 2  # the crash's rerun, nothing more


def test_a_failing_step_under_each_policy_and_the_results_read_by_the_steps_after_it(
        processes: Processes, db: Any, db_uri: str) -> None:
    """One step fails: the job that waits for it with cancel is archived upstream-failed, with skip
    skipped (and what waits for that with skipped -> run runs), with run runs and reads the
    failure and the results of its other upstream."""
    with Recruiter.connect(db_uri) as rec:
        bad = AlwaysFails(db_uri).as_job_of(rec).enqueue()
        good = Step(db_uri, n=5).as_job_of(rec).enqueue()
        cancels = Step(db_uri, n=1).as_job_of(rec).after(bad, good).enqueue()
        skips = Step(db_uri, n=2).as_job_of(rec).after(bad, on={"failed": "skip"}).enqueue()
        joins = Step(db_uri, n=3).as_job_of(rec).after(skips, on={"skipped": "run"}).enqueue()
        runs = ReadsResults(db_uri).as_job_of(rec).after(bad, good, if_failed="run").enqueue()
    processes.recruiter()
    processes.worker("--concurrency", "2")
    every = [bad, good, cancels, skips, joins, runs]
    wait_for(lambda: db.archived.count_documents({"_id": {"$in": every}}) == 6, timeout_s=90,
             message="every step archived")
    whys = {d["_id"]: d["why"] for d in db.archived.find({"_id": {"$in": every}})}
    assert whys == {bad: "not-scheduled-by-retry-policy", good: "done", cancels: "upstream-failed",
                    skips: "skipped", joins: "done", runs: "done"}
    assert str(bad) in db.archived.find_one({"_id": skips})["reason"]
    assert db.ledger.count_documents({"job": {"$in": [str(cancels), str(skips)]}}) == 0  # never ran
    (read,) = db.ledger.find({"job": str(runs), "event": "start"})
    assert read["values"] == {str(bad): f"unavailable: job {bad} ended not-scheduled-by-retry-policy: it has no result",
                              str(good): 5}
