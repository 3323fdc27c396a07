"""Worker process behaviours: concurrency, bad jobs, and the embedded server on demand."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from recruiter import Recruiter
from recruiter.domain.retry import RetryManyTimes
from recruiter.processes.embedded import stop_recorded
from tests.conftest import REPO, free_port, wait_for
from tests.processes.conftest import Processes
from tests.workables import BrokenConstructor, Record


def test_concurrency_runs_n_workers_with_their_own_roster_entries(
        processes: Processes, db: Any, db_uri: str) -> None:
    processes.recruiter()
    worker = processes.worker("--id", "multi", "--concurrency", "3")
    entries = wait_for(lambda: (docs := list(db.roster.find())) and len(docs) == 6 and docs,
                       message="six roster entries: three slots, each with one look-ahead lane (--prefetch 1)")
    assert {d["_id"] for d in entries} == {"multi-0", "multi-1", "multi-2", "multi-0~1", "multi-1~1", "multi-2~1"}
    assert {d["runner"] for d in entries} == {"multi-0", "multi-1", "multi-2"}
    assert {d["pid"] for d in entries} == {worker.pid}

    with Recruiter.connect(db_uri) as rec:
        rec.enqueue_many(Record(db_uri, n=i, sleep_s=1.0).as_job_of(rec) for i in range(3))
    wait_for(lambda: db.archived.count_documents({"why": "done"}) == 3, timeout_s=30, message="three jobs")

    events = sorted(db.ledger.find(), key=lambda d: d["at"])
    first_end = next(i for i, e in enumerate(events) if e["event"] == "end")
    assert [e["event"] for e in events[:first_end]] == ["start"] * 3, "the three jobs overlapped"
    assert {e["worker"] for e in events} == {"multi-0", "multi-1", "multi-2"}


def test_a_raising_constructor_is_a_failed_attempt_and_an_unknown_class_is_given_back(
        processes: Processes, db: Any, db_uri: str) -> None:
    """Neither is a crash. A class this worker cannot import is not the job's failure (issue 22:
    a rolling deploy): given back unattempted, then archived ``unrunnable`` at --give-back-for."""
    with Recruiter.connect(db_uri) as rec:
        unknown = BrokenConstructor(1).as_job_of(rec).retry_with(RetryManyTimes(1, wait=0)).build(rec.clock.now())
        unknown["workable"]["class"] = "tests.no_such_module:Missing"
        broken = BrokenConstructor(1).as_job_of(rec).retry_with(RetryManyTimes(1, wait=0)).build(rec.clock.now())
        broken["workable"]["parameters"]["value"] = -1
        db.scheduled.insert_many([unknown, broken])
    processes.recruiter()
    processes.cleaner()
    worker = processes.worker("--id", "sturdy", "--give-back-for", "2s")

    wait_for(lambda: db.archived.count_documents({}) == 2, timeout_s=60, message="both bad jobs archived")
    a = db.archived.find_one({"_id": unknown["_id"]})
    b = db.archived.find_one({"_id": broken["_id"]})
    assert b["why"] == "tried-too-many-times"
    assert b["attempts"] == 2
    assert [e["outcome"] for e in b["executions"]] == ["failed", "failed"]
    assert all(e["worker"] == "sturdy" for e in b["executions"])
    assert b["last_execution"]["class"] == "builtins:RuntimeError"
    assert "cannot build with -1" in b["last_execution"]["message"]
    assert a["why"] == "unrunnable"
    assert a["attempts"] == 0
    assert a["executions"] == []
    assert "tests.no_such_module" in a["reason"]
    assert {r["worker"] for r in a["refusals"]} == {"sturdy"}
    for doc in (a, b):
        assert doc["crashes"] == 0
    assert worker.popen.poll() is None, "the worker is still running"
    assert db.roster.find_one({"_id": "sturdy"})["pid"] == worker.pid


def test_embedded_server_starts_on_demand(tmp_path: Path) -> None:
    port = free_port()
    storage = tmp_path / "embedded"
    pid_file = storage / "server.pid"
    uri = f"mongodb://127.0.0.1:{port}/demo"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cleaner = subprocess.Popen(
        [sys.executable, "-m", "recruiter.cli", "cleaner", "start", "--target", uri, "--embedded",
         "--embedded-path", str(storage), "--log-format", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    try:
        wait_for(lambda: pid_file.exists(), timeout_s=30, message="the embedded server's pid file")
        with Recruiter.connect(uri) as rec:
            lease = wait_for(lambda: rec.db.metadata.find_one({"_id": "cleaner"}), timeout_s=30,
                             message="the cleaner to take its lease on the embedded server")
        assert lease["epoch"] == 1
    finally:
        cleaner.send_signal(signal.SIGTERM)
        assert cleaner.wait(20) == 0
        assert stop_recorded(storage) is not None, "the server is kept after the cleaner exits"


def test_processes_ride_out_a_database_restart(tmp_path: Path) -> None:
    from recruiter.processes.embedded import start as start_server

    port = free_port()
    storage = tmp_path / "db"
    server = start_server(port, storage, log_path=tmp_path / "server.log")
    uri = f"mongodb://127.0.0.1:{port}/restart"
    procs = Processes(uri, tmp_path)
    try:
        with Recruiter.connect(uri) as rec:
            procs.recruiter()
            procs.worker("--id", "steady")
            rec.enqueue_many(Record(uri, n=i).as_job_of(rec) for i in range(20))
            wait_for(lambda: rec.db.archived.count_documents({}) == 20, timeout_s=30, message="first batch")
        # A clean restart (SIGTERM). After a SIGKILL, SecantusDB 0.7.0b3 was seen to lose
        # writes it had acknowledged (an archived copy and its delete), which no client can
        # make up for; the cleaner then unlocks the job its worker no longer refers to.
        server.terminate()
        server.wait(30)
        server = start_server(port, storage, log_path=tmp_path / "server.log")
        with Recruiter.connect(uri) as rec:
            rec.enqueue_many(Record(uri, n=i).as_job_of(rec) for i in range(20, 40))
            try:
                wait_for(lambda: rec.db.archived.count_documents({}) == 40, timeout_s=60,
                         message="the second batch, after the restart")
            except AssertionError:
                print(procs.logs())
                raise
            assert rec.db.archived.count_documents({"why": "done"}) == 40
            assert all(p.popen.poll() is None for p in procs.started), procs.logs()
            starts = Counter(d["job"] for d in rec.db.ledger.find({"event": "start"}))
            assert len(starts) == 40
            assert set(starts.values()) == {1}
    finally:
        procs.stop_all()
        if server.poll() is None:
            server.terminate()
            server.wait(10)
