"""Jobs run twice or lost after one SIGKILLed worker: the recruiter and Agenda, the same test.

Two worker processes (one slot each) on a fresh database; ``jobs`` jobs of
:data:`JOB_S` seconds are enqueued at once; when the victim (worker 0) is in the
middle of a job it is SIGKILLed; then the test waits until every job has a
finished run (or a deadline) and counts, from the runs the job bodies recorded
(collection ``bench_runs``: ``job``, ``pid``, ``started``, ``finished``, written
when a run starts and when it ends):

- ``lost``: jobs with no finished run;
- ``twice``: jobs with two finished runs or more;
- ``rerun``: jobs started more than once (the victim's job, run again: expected);
- ``recovered_s``: from the kill to the last job finished.

The recruiter runs its real CLI processes (a recruiter, a cleaner, two workers),
the cleaner judging a worker dead after :data:`DEAD_AFTER` (heartbeats every
:data:`HEARTBEAT`); Agenda runs ``worker.mjs`` with the bench's settings but a lock
lifetime of 5 s (:data:`bench.peers.agenda.KILL_LOCK_LIFETIME_MS`), which plays the
part of the recruiter's dead-worker delay.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from bench.jobs import GROUP
from bench.peers import agenda
from bench.procs import REPO, Fleet, Proc
from bench.scenario import POLL_FROM, POLL_TO, Producer
from bench.server import Server
from recruiter import JobContext, Workable

JOB_S = 1.0
HEARTBEAT = "1s"
DEAD_AFTER = "3s"
RUNS = "bench_runs"


@cache
def _runs(uri: str) -> Any:
    client: MongoClient[Any] = MongoClient(uri, tz_aware=True)
    return client.get_default_database()[RUNS]


class RecordedSleep(Workable):
    """Records its run (started, then finished) in ``bench_runs`` of ``uri``'s database, sleeping between."""

    group = GROUP

    def __init__(self, uri: str, seconds: float = JOB_S) -> None:
        self.uri = uri
        self.seconds = seconds

    def execute(self, ctx: JobContext) -> None:
        runs = _runs(self.uri)
        run_id = runs.insert_one({"job": str(ctx.job_id), "pid": os.getpid(), "started": datetime.now(UTC),
                                  "finished": None}).inserted_id
        time.sleep(self.seconds)
        runs.update_one({"_id": run_id}, {"$set": {"finished": datetime.now(UTC)}})


def count_runs(runs: Any, job_ids: list[str]) -> dict[str, Any]:
    """Lost, twice and re-run jobs among ``job_ids``, from their run records."""
    started: Counter[str] = Counter()
    finished: Counter[str] = Counter()
    for doc in runs.find({}, {"job": 1, "finished": 1}):
        started[doc["job"]] += 1
        if doc.get("finished") is not None:
            finished[doc["job"]] += 1
    return {"jobs": len(job_ids), "lost": sum(finished[j] == 0 for j in job_ids),
            "twice": sum(finished[j] >= 2 for j in job_ids), "rerun": sum(started[j] >= 2 for j in job_ids),
            "runs": sum(started.values())}


def _kill_mid_job(runs: Any, victim: Proc, check: Callable[[], None], timeout_s: float = 60) -> float:
    """SIGKILL ``victim`` once it is in the middle of a job (a started, unfinished run of its pid)."""
    deadline = time.monotonic() + timeout_s
    while runs.count_documents({"pid": victim.pid, "finished": None}) == 0:
        check()
        if time.monotonic() > deadline:
            raise RuntimeError(f"the victim (pid {victim.pid}) started no job in {timeout_s:.0f}s")
        time.sleep(0.02)
    time.sleep(JOB_S / 3)  # well inside its job
    victim.popen.kill()
    victim.popen.wait(10)
    return time.monotonic()


def _wait_all_finished(runs: Any, job_ids: list[str], check: Callable[[], None], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while len(runs.distinct("job", {"finished": {"$ne": None}})) < len(job_ids):
        check()
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _survivors_alive(fleet: Fleet, victim: Proc) -> Callable[[], None]:
    def check() -> None:
        for p in fleet.procs:
            if p is not victim and p.popen.poll() is not None:
                raise RuntimeError(f"{p.kind} process {p.pid} exited with {p.popen.returncode}: "
                                   f"{p.log_path.read_text(errors='replace')[-1500:]}")
    return check


def _result(runs: Any, job_ids: list[str], killed_at: float, done: bool, settle_s: float) -> dict[str, Any]:
    recovered_s = time.monotonic() - killed_at if done else None
    time.sleep(settle_s)  # a late second run would show here
    return {**count_runs(runs, job_ids), "all_finished": done, "recovered_s": recovered_s}


def recruiter_kill(server: Server, jobs: int, work_dir: Path, recruiter_args: tuple[str, ...] = ()) -> dict[str, Any]:
    database = f"bench_kill_recruiter_{os.getpid()}"
    uri = server.database_uri(database)
    client: MongoClient[Any] = MongoClient(uri, tz_aware=True)
    client.drop_database(database)
    runs = client[database][RUNS]
    producer = Producer(uri, create_indexes=True)
    fleet = Fleet(uri, work_dir)
    try:
        fleet.product("recruiter", "start", *recruiter_args)
        fleet.product("cleaner", "cleaner", "start", "--considered-dead-after", DEAD_AFTER,
                      "--heartbeat-interval", HEARTBEAT, "--interval", "500ms")
        workers = [fleet.product("worker", "worker", "start", "--group", GROUP, "--import-path", str(REPO),
                                 "--poll-from", POLL_FROM, "--poll-to", POLL_TO, "--heartbeat-interval", HEARTBEAT)
                   for _ in range(2)]
        deadline = time.monotonic() + 60
        while client[database]["roster"].count_documents({}) < 2:  # the workers registered
            fleet.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError("recruiter kill test: the workers did not register in 60 s")
            time.sleep(0.05)
        job_ids = [str(h) for h in producer.rec.enqueue_many(RecordedSleep(uri) for _ in range(jobs))]
        check = _survivors_alive(fleet, workers[0])
        killed_at = _kill_mid_job(runs, workers[0], check)
        done = _wait_all_finished(runs, job_ids, check, timeout_s=60 + jobs * JOB_S)
        out = _result(runs, job_ids, killed_at, done, settle_s=2 * JOB_S)
        out["settings"] = {"heartbeat_interval": HEARTBEAT, "considered_dead_after": DEAD_AFTER}
        return out
    finally:
        fleet.stop()
        producer.close()
        client.drop_database(database)
        client.close()


def agenda_kill(server: Server, jobs: int, work_dir: Path, settings: agenda.Settings | None = None) -> dict[str, Any]:
    settings = settings or replace(agenda.SETTINGS, lock_lifetime_ms=agenda.KILL_LOCK_LIFETIME_MS)
    database = f"bench_kill_agenda_{os.getpid()}"
    uri = server.database_uri(database)
    client: MongoClient[Any] = MongoClient(uri, tz_aware=True)
    client.drop_database(database)
    runs = client[database][RUNS]
    fleet = Fleet(uri, work_dir)
    enqueuer: agenda.Enqueuer | None = None
    try:
        enqueuer = agenda.Enqueuer(fleet)
        ready = [work_dir / f"agenda-ready-{i}" for i in range(2)]
        workers = [agenda.start_node(fleet, "worker", "worker.mjs",
                                     [*settings.worker_args(), "--ready", str(flag), "--flush-ms", "0"])
                   for flag in ready]
        deadline = time.monotonic() + 60
        while not all(f.exists() for f in ready):
            fleet.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError("agenda kill test: the workers did not start in 60 s")
            time.sleep(0.05)
        job_ids = enqueuer.enqueue("sleep1000", jobs)
        check = _survivors_alive(fleet, workers[0])
        killed_at = _kill_mid_job(runs, workers[0], check)
        timeout_s = 60 + jobs * JOB_S + settings.lock_lifetime_ms / 1000
        done = _wait_all_finished(runs, job_ids, check, timeout_s=timeout_s)
        out = _result(runs, job_ids, killed_at, done, settle_s=2 * JOB_S)
        out["settings"] = {"lock_lifetime_ms": settings.lock_lifetime_ms}
        return out
    finally:
        if enqueuer is not None:
            enqueuer.stop()
        fleet.stop()
        client.drop_database(database)
        client.close()
