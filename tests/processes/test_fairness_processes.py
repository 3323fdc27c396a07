"""Fairness with the real processes: a tenant with a big backlog does not hold up a small one."""

from __future__ import annotations

import signal
from collections import Counter, defaultdict
from typing import Any

from recruiter import Recruiter
from tests.conftest import wait_for
from tests.processes.conftest import Processes
from tests.workables import Record

WORKERS = 12


def test_a_small_tenant_takes_turns_with_a_big_backlog(
        processes: Processes, db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        big = rec.enqueue_many(Record(db_uri, n=i).as_job_of(rec).for_tenant("A") for i in range(2_000))
        small = rec.enqueue_many(Record(db_uri, n=i).as_job_of(rec).for_tenant("B") for i in range(10))
    small_ids = {str(i) for i in small}

    recruiter = processes.recruiter()
    worker = processes.worker("--concurrency", str(WORKERS))
    wait_for(lambda: db.ledger.count_documents({"event": "end", "job": {"$in": list(small_ids)}}) == 10,
             timeout_s=90, message="B's 10 jobs to run")
    recruiter.signal(signal.SIGTERM)
    worker.signal(signal.SIGTERM)
    assert recruiter.wait(30) == 0
    assert worker.wait(30) == 0

    starts = list(db.ledger.find({"event": "start"}, {"job": 1, "at": 1, "assigned_at": 1}))
    tenant_of = {d["job"]: "B" if d["job"] in small_ids else "A" for d in starts}

    # The recruiter's order: every job of a round carries that round's assigned_at.
    rounds: dict[Any, Counter[str]] = defaultdict(Counter)
    for d in starts:
        rounds[d["assigned_at"]][tenant_of[d["job"]]] += 1
    served: Counter[str] = Counter()
    for at in sorted(rounds):
        served.update(rounds[at])
        if served["B"] == 10:
            break
        # While B has jobs waiting, A and B take turns: at every round's end
        # neither has had more than one job more than the other.
        assert abs(served["A"] - served["B"]) <= 1, (at, dict(served), dict(rounds[at]))
    else:
        raise AssertionError(f"B's jobs were not all assigned: {dict(served)}")
    print(f"\n{len([a for a in rounds if a <= at])} rounds assigned B's 10 jobs along with {served['A']} of A's "
          f"({WORKERS} workers)")
    assert served["A"] <= 10 + WORKERS - 1

    # The same seen from the workers: job starts in time order (a slot picks its
    # job up a little after the round, so this order is blurred by up to a round).
    by_time = sorted(starts, key=lambda d: d["at"])
    last_b = max(d["at"] for d in by_time if d["job"] in small_ids)
    position = sum(1 for d in by_time if d["at"] <= last_b)
    print(f"all 10 of B's jobs started within the first {position} job starts")
    assert position <= 20 + 2 * WORKERS

    # Under FIFO by scheduled_at (the order before this policy), on the same jobs,
    # B's first job would have been the 2 001st to start.
    jobs = sorted([*db.scheduled.find({}, {"scheduled_at": 1}), *db.archived.find({}, {"scheduled_at": 1})],
                  key=lambda d: (d["scheduled_at"], d["_id"]))
    fifo_positions = [n for n, d in enumerate(jobs, 1) if d["_id"] in set(small)]
    print(f"under FIFO, B's jobs would have started at positions {fifo_positions[0]}..{fifo_positions[-1]}")
    assert len(jobs) == 2_010
    assert fifo_positions[0] == len(big) + 1
    assert fifo_positions[0] > 20 + 2 * WORKERS
