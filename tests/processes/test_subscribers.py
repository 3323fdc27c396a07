"""``--subscriber MODULE:CALLABLE`` on the real processes: the user's function receives each event once,
and a subscriber that always fails is logged without breaking the process."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path
from typing import Any

from recruiter import Recruiter
from tests.conftest import wait_for
from tests.event_subscribers import RECORD_ENVVAR
from tests.processes.conftest import Processes
from tests.workables import AlwaysFails, Record

RECORD = ["--subscriber", "tests.event_subscribers:record"]
EXPLODE = ["--subscriber", "tests.event_subscribers:explode"]


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_each_process_calls_its_subscribers_and_survives_a_failing_one(
        processes: Processes, db: Any, db_uri: str, tmp_path: Path) -> None:
    files = {name: tmp_path / f"{name}.events" for name in ("recruiter", "worker", "cleaner")}
    with Recruiter.connect(db_uri) as rec:
        ids = [rec.enqueue(Record(db_uri, n=i)) for i in range(3)] + [rec.enqueue(AlwaysFails(db_uri))]
    recruiter = processes.start("recruiter", "start", "--backoff-from", "20ms", "--backoff-to", "200ms",
                                *EXPLODE, *RECORD, env={RECORD_ENVVAR: str(files["recruiter"])})
    worker = processes.start("worker", "worker", "start", "--id", "w", "--prefetch", "0",
                             "--heartbeat-interval", "300ms", *RECORD, *EXPLODE,
                             env={RECORD_ENVVAR: str(files["worker"])})
    processes.start("cleaner", "cleaner", "start", "--interval", "200ms", *RECORD,
                    env={RECORD_ENVVAR: str(files["cleaner"])})

    wait_for(lambda: db.archived.count_documents({}) == 4, timeout_s=120, message="4 archived jobs")
    wait_for(lambda: len([e for e in events(files["recruiter"]) if e["kind"] == "JobArchived"]) == 4,
             timeout_s=30, message="the recruiter's 4 JobArchived events")
    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0
    wait_for(lambda: any(e["kind"] == "LeaseWon" for e in events(files["cleaner"])), timeout_s=30,
             message="the cleaner's lease")

    by_worker = events(files["worker"])
    kinds = Counter(e["kind"] for e in by_worker)
    assert kinds == {"WorkerRegistered": 1, "JobStarted": 4, "JobFinished": 4, "WorkerGone": 1}, kinds
    finished = {e["job_id"]: e for e in by_worker if e["kind"] == "JobFinished"}
    assert set(finished) == {str(i) for i in ids}
    assert finished[str(ids[-1])]["outcome"] == "failed"
    assert finished[str(ids[-1])]["exception"] == "boom"  # the exception itself reached the subscriber
    assert "ValueError: boom" in finished[str(ids[-1])]["trace"]
    by_recruiter = events(files["recruiter"])
    archived = [e for e in by_recruiter if e["kind"] == "JobArchived"]
    assert sorted(e["job_id"] for e in archived) == sorted(str(i) for i in ids)  # each once
    assert [e["role"] for e in by_recruiter if e["kind"] == "LeaseWon"] == ["recruiter"]
    rounds = [e for e in by_recruiter if e["kind"] == "RoundCommitted"]
    assert sum(e["assigned"] for e in rounds) == 4
    # The failing subscriber is logged (each event), and the processes went on: the jobs were done.
    for proc in (recruiter, worker):
        failures = [json.loads(line) for line in proc.log().splitlines()
                    if '"event.subscriber_failed"' in line]
        assert failures, proc.log()[-2000:]
        assert all(f["subscriber"] == "tests.event_subscribers:explode" for f in failures)
    assert "job.archived" in recruiter.log()  # the log subscriber still prints its lines


def test_a_subscriber_that_cannot_be_loaded_is_a_usage_error(processes: Processes) -> None:
    proc = processes.start("worker", "worker", "start", "--subscriber", "tests.event_subscribers:missing")
    assert proc.wait(60) == 2
    assert "has no 'missing'" in proc.log()
    assert "Traceback" not in proc.log()
