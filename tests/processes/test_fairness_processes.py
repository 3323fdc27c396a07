"""Fairness with the real processes: a tenant with a big backlog does not hold up a small one."""

from __future__ import annotations

import signal
from typing import Any

from recruiter import Recruiter
from tests.conftest import wait_for
from tests.processes.conftest import Processes
from tests.workables import Record

WORKERS = 12


def test_a_small_tenant_is_served_within_two_rounds_despite_a_big_backlog(
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
    assert recruiter.wait(30) == 0 and worker.wait(30) == 0

    starts = sorted(db.ledger.find({"event": "start"}, {"job": 1, "at": 1}), key=lambda d: d["at"])
    last_b = max(d["at"] for d in starts if d["job"] in small_ids)
    # Every job (of A or B) that started no later than B's last one; ties count against us.
    position = sum(1 for d in starts if d["at"] <= last_b)
    two_rounds = 2 * WORKERS
    print(f"\nall 10 of B's jobs started within the first {position} job starts "
          f"(two rounds' worth: {two_rounds} with {WORKERS} workers)")
    assert position <= two_rounds

    # Under FIFO by scheduled_at (the order before this policy), on the same jobs,
    # B's first job would have been the 2 001st to start.
    jobs = sorted([*db.scheduled.find({}, {"scheduled_at": 1}), *db.archived.find({}, {"scheduled_at": 1})],
                  key=lambda d: (d["scheduled_at"], d["_id"]))
    fifo_positions = [n for n, d in enumerate(jobs, 1) if d["_id"] in set(small)]
    print(f"under FIFO, B's jobs would have started at positions {fifo_positions[0]}..{fifo_positions[-1]}")
    assert len(jobs) == 2_010 and fifo_positions[0] == len(big) + 1
    assert fifo_positions[0] > two_rounds
