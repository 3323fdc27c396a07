"""The skew rule for jobs that wait (issue 42): a 0.1.1 leader knows nothing of ``after`` and must
never run a dependent early. A held job's ``scheduled_at`` is 9999-01-01 (its due time is kept in
``after.due_at``), and that leader hands out only jobs due now, so it leaves the job held; a 0.2.0
leader taking over releases it (its sweep), and a 0.1.1 worker runs it, once, after what it waited for.
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


def test_a_previous_release_leader_never_runs_a_dependent_and_this_release_releases_it(
        processes: Processes, previous: Previous, db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        first = Record(db_uri, n=1, sleep_s=1.0).as_job_of(rec).enqueue()
        waits = Record(db_uri, n=2).as_job_of(rec).after(first).enqueue()
    old_leader = start_previous(processes, previous, "recruiter", "start", *FAST_RECRUITER)
    start_previous(processes, previous, "worker", "worker", "start", *FAST_WORKER, "--id", "old")
    wait_for(lambda: db.archived.find_one({"_id": first}), timeout_s=60, message="the first job done (old leader)")
    # The old leader goes on with its rounds: a job enqueued after runs, the held one stays held.
    with Recruiter.connect(db_uri) as rec:
        later = Record(db_uri, n=3).as_job_of(rec).enqueue()
    wait_for(lambda: db.archived.find_one({"_id": later}), timeout_s=60, message="a later job done (old leader)")
    held = db.scheduled.find_one({"_id": waits})
    assert held is not None
    assert held["after"]["held"] is True
    assert db.ledger.count_documents({"n": 2}) == 0

    old_leader.signal(signal.SIGTERM)
    assert old_leader.wait(30) == 0
    processes.recruiter()  # this release's leader: its sweep finds the dependency archived
    wait_for(lambda: db.archived.find_one({"_id": waits}), timeout_s=60, message="the dependent done (new leader)")
    ends = {e["n"]: e["at"] for e in db.ledger.find({"event": "end"})}
    (started,) = list(db.ledger.find({"event": "start", "n": 2}))
    assert started["at"] >= ends[1]
