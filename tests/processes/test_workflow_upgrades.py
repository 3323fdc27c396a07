"""The skew rule for jobs that wait (issue 42), beside the previous release (0.2.0).

Jobs that wait are enqueued by this release's producer and run by processes of both releases:
a previous-release leader and worker run a chain this release wrote (the dependent only after
what it waits for, once), then this release's leader takes over beside the previous worker and
runs a second chain the same way. A held job's ``scheduled_at`` is 9999-01-01 (its due time is in
``after.due_at``), so a leader of any release hands it out only once it is released.
"""

from __future__ import annotations

import signal
from typing import Any

import pytest

from recruiter import Recruiter
from tests.conftest import wait_for
from tests.processes.conftest import FAST_RECRUITER, FAST_WORKER, Processes
from tests.processes.test_upgrades import Previous, start_previous
from tests.processes.test_upgrades import previous as previous  # the fixture, built once per session
from tests.workables import Record

pytestmark = [pytest.mark.processes, pytest.mark.timeout(900)]


def chain(db_uri: str, first_n: int) -> tuple[Any, Any]:
    with Recruiter.connect(db_uri) as rec:
        first = Record(db_uri, n=first_n, sleep_s=1.0).as_job_of(rec).enqueue()
        waits = Record(db_uri, n=first_n + 1).as_job_of(rec).after(first).enqueue()
    return first, waits


def ran_once_after(db: Any, first_n: int) -> None:
    ends = {e["n"]: e["at"] for e in db.ledger.find({"event": "end"})}
    (started,) = list(db.ledger.find({"event": "start", "n": first_n + 1}))
    assert started["at"] >= ends[first_n]
    assert db.ledger.count_documents({"event": "start", "n": first_n}) == 1


def test_both_releases_run_a_dependent_once_after_what_it_waits_for(
        processes: Processes, previous: Previous, db: Any, db_uri: str) -> None:
    _, waits = chain(db_uri, 1)
    old_leader = start_previous(processes, previous, "recruiter", "start", *FAST_RECRUITER)
    start_previous(processes, previous, "worker", "worker", "start", *FAST_WORKER, "--id", "old")
    wait_for(lambda: db.archived.find_one({"_id": waits}), timeout_s=60, message="the dependent done (old leader)")
    ran_once_after(db, 1)

    old_leader.signal(signal.SIGTERM)
    assert old_leader.wait(30) == 0
    processes.recruiter()  # this release's leader, beside the previous release's worker
    _, waits = chain(db_uri, 3)
    wait_for(lambda: db.archived.find_one({"_id": waits}), timeout_s=60, message="the dependent done (new leader)")
    ran_once_after(db, 3)
    assert {d["why"] for d in db.archived.find({})} == {"done"}
