"""A rate keeps its window on the jobs' own start records, with several worker processes (the start
gate, recruiter.domain.start_gate): ``5/s`` with no burst over 10 s starts at least 0.97 of 50 jobs and
never more than 5 in any 1 s window, judged from the start time each job's execution records (the
worker's record: the server's time of its start token). The default suite's twin of the 30 s timed
test (tests/processes/test_rate_delivery.py)."""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from typing import Any

from recruiter import Recruiter
from tests.conftest import wait_for
from tests.processes.conftest import Processes
from tests.processes.test_limits_processes import cli, most_in_a_window
from tests.workables import Record

RATE, SPAN_S = 5, 10.0
WANTED = 0.97 * RATE * SPAN_S  # 48.5 starts
BACKLOG = 80  # more than the test starts: the group never runs dry


def recorded_starts(db: Any, group: str) -> list[datetime]:
    """The start time of every execution of the group's jobs, as their workers recorded it."""
    found = []
    for coll in (db.archived, db.scheduled):
        for doc in coll.find({"group": group}, {"executions.started_at": 1}):
            found += [e["started_at"] for e in doc.get("executions") or [] if isinstance(e.get("started_at"), datetime)]
    return sorted(found)


def test_five_a_second_holds_on_the_recorded_starts_of_three_workers(processes: Processes, db: Any,
                                                                      db_uri: str) -> None:
    done = cli(db_uri, "limits", "set", "--group", "paced", "--rate", f"{RATE}/s")
    assert done.returncode == 0, done.stderr
    for _ in range(3):
        processes.worker("--concurrency", "4")
    processes.recruiter()
    with Recruiter.connect(db_uri) as rec:
        # Warm the workers first (a slot's first job imports the job's module and opens the ledger's client).
        rec.enqueue_many(Record(db_uri, n=i).as_job_of(rec).in_group("warm") for i in range(12))
        wait_for(lambda: db.archived.count_documents({"group": "warm"}) == 12, timeout_s=90,
                 message="the warm-up jobs to run")
        rec.enqueue_many(Record(db_uri, n=i).as_job_of(rec).in_group("paced") for i in range(BACKLOG))

    def spanned() -> bool:
        found = recorded_starts(db, "paced")
        return len(found) > 2 and found[-1] - found[2] >= timedelta(seconds=SPAN_S + 1)

    wait_for(spanned, timeout_s=120, message=f"recorded starts over {SPAN_S + 1:.0f}s")
    found = recorded_starts(db, "paced")
    first = found[2]  # the steady state: from the third start on (the first starts with a full bucket)
    within = [t for t in found if first <= t < first + timedelta(seconds=SPAN_S)]
    print(f"\n{len(within)} recorded starts in {SPAN_S:.0f}s ({len(within) / SPAN_S:.2f}/s for {RATE}/s); at most "
          f"{most_in_a_window(found, 1.0)} in any 1 s window")
    # The window holds by design (every recorded start is a token of the gate's log), on any machine.
    assert most_in_a_window(found, 1.0) <= RATE
    # How many start is a figure of the machine's speed too (a machine at load 20 on 2 cores started 2.5/s
    # with the gate or without): asserted on a quiet machine, as the timed tests are.
    if os.environ.get("RECRUITER_TIMED_TESTS"):
        assert len(within) >= WANTED, f"{len(within)} starts in {SPAN_S}s, wanted at least {WANTED}"
