"""The security recipe grants what the code uses (issue 21, item 5).

Each process kind (recruiter, worker, cleaner: the real CLI) and the producer API run a
workload that goes through their paths: jobs done, failed and retried, a worker
SIGKILLed and its job rescued by the cleaner, a schedule firing, cancels, a job given
back, unique keys, resubmit, waits, history pruned. A command listener in each process
(recruiter.store.privileges, ``RECRUITER_RECORD_PRIVILEGES_FILE``) records the
(collection, privilege action) pairs it used. The test fails when the role that
docs/operations/security.md gives that process does not grant one of them.
"""

from __future__ import annotations

import json
import os
import re
import signal
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from recruiter import Recruiter
from recruiter.retry import RetryManyTimes
from recruiter.store import privileges
from tests.conftest import REPO, wait_for
from tests.processes.conftest import FAST_RECRUITER, Processes
from tests.workables import AlwaysFails, Record, SlowUntilKilled, UniqueRecord

ROLE_OF = {"producer": "recruiterProducer", "worker": "recruiterWorker", "recruiter": "recruiterLeader",
           "cleaner": "recruiterCleaner"}


def recipe() -> dict[str, dict[str, set[str]]]:
    """The roles of docs/operations/security.md: role -> collection ("" = the database) -> actions."""
    text = (REPO / "docs" / "operations" / "security.md").read_text()
    found = re.search(r"const roles = (\{.*?\n\})", text, flags=re.S)
    assert found, "the recipe's `const roles = {...}` block is missing"
    roles = json.loads(found.group(1))
    return {role: {coll: set(actions) for coll, actions in grants.items()} for role, grants in roles.items()}


def used(path: Path, database: str) -> set[tuple[str, str]]:
    if not path.exists():
        return set()
    pairs = set()
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        if entry["db"] == database:
            pairs.add((entry["collection"], entry["action"]))
    return pairs


def producer_workload(db_uri: str, tmp_path: Path) -> list[Any]:
    with Recruiter.connect(db_uri) as rec:
        done = [rec.enqueue(Record(db_uri, n=1)), *rec.enqueue_many([Record(db_uri, n=n) for n in range(2, 5)])]
        rec.enqueue(AlwaysFails(db_uri).as_job_of(rec).retry_with(RetryManyTimes(1, wait=0)))
        rec.enqueue(UniqueRecord(db_uri, n=7).as_job_of(rec).unique("k7", scope=timedelta(minutes=5)))
        rec.enqueue(UniqueRecord(db_uri, n=7).as_job_of(rec).unique("k7", scope=timedelta(minutes=5)))
        rec.enqueue(SlowUntilKilled(db_uri, 60).as_job_of(rec).in_group("doomed"))
        later = rec.enqueue(Record(db_uri, n=8).as_job_of(rec).schedule_in(seconds=3600))
        rec.resubmit(later.id)
        rec.cancel(rec.enqueue(Record(db_uri, n=9).as_job_of(rec).schedule_in(seconds=3600)).id)
        rec.schedule("tick", every="1s", job=Record(db_uri, n=10).as_job_of(rec))
        for handle in done:
            handle.wait(timeout=60)
        rec.wait_all(done, timeout=60)
        assert [h.state for h in rec.as_completed(done, timeout=60)]
        rec.job(done[0].id).view  # noqa: B018 - reads the job's document
    return done


def test_every_process_is_granted_what_it_uses(processes: Processes, db: Any, db_uri: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    files = {kind: tmp_path / f"{kind}.jsonl" for kind in ROLE_OF}

    def env(kind: str) -> dict[str, str]:
        return {privileges.FILE_ENVVAR: str(files[kind])}

    processes.start("recruiter", "start", *FAST_RECRUITER, env=env("recruiter"))
    processes.start("recruiter", "start", *FAST_RECRUITER, env=env("recruiter"))  # a standby
    processes.start("worker", "worker", "start", "--heartbeat-interval", "300ms", "--concurrency", "2",
                    "--group", "generic", env=env("worker"))
    doomed = processes.start("worker", "worker", "start", "--heartbeat-interval", "300ms", "--group", "doomed",
                             env=env("worker"))
    processes.start("cleaner", "cleaner", "start", "--considered-dead-after", "2s", "--interval", "200ms",
                    "--lease-ttl", "2s", "--clean-after", "1s", env=env("cleaner"))
    monkeypatch.setenv(privileges.FILE_ENVVAR, str(files["producer"]))
    # A job no worker can import: given back (refusals pushed by the round).
    ghost = Record(db_uri, n=0)
    with Recruiter.connect(db_uri) as rec:
        doc = ghost.as_job_of(rec).build(rec.clock.now())
    doc["workable"]["class"] = "tests.no_such_module:Ghost"
    db.scheduled.insert_one(doc)
    producer_workload(db_uri, tmp_path)
    wait_for(lambda: db.ledger.find_one({"event": "start", "group": "doomed"}), timeout_s=60,
             message="the doomed job to start")
    doomed.signal(signal.SIGKILL)
    processes.start("worker", "worker", "start", "--heartbeat-interval", "300ms", "--group", "doomed",
                    env=env("worker"))  # runs the rescued job
    wait_for(lambda: db.archived.find_one({"schedule.name": "tick"}), timeout_s=60, message="a schedule fired")
    wait_for(lambda: db.scheduled.find_one({"_id": doc["_id"], "refusals": {"$exists": True}}), timeout_s=60,
             message="the ghost job given back")
    wait_for(lambda: db.ledger.count_documents({"event": "end", "group": "doomed"}) >= 1, timeout_s=90,
             message="the doomed job rescued and run again")
    with Recruiter.connect(db_uri) as rec:  # cancel a running job: the worker halts it
        slow = rec.enqueue(SlowUntilKilled(db_uri, 60))
        wait_for(lambda: db.ledger.find_one({"job": str(slow.id), "event": "start"}), timeout_s=60,
                 message="the slow job to start")
        rec.cancel(slow.id)
    processes.stop_all()

    roles = recipe()
    database = db.name
    missing = {}
    for kind, role in ROLE_OF.items():
        pairs = used(files[kind], database)
        assert pairs, f"nothing recorded for {kind}"
        grants = roles[role]
        lacking = sorted(p for p in pairs if p[1] not in grants.get(p[0], set()))
        if lacking:
            missing[role] = lacking
        print(f"{kind}: {sorted(pairs)}")
    assert missing == {}, f"the recipe does not grant: {missing}"
    assert os.environ.get(privileges.FILE_ENVVAR) == str(files["producer"])
