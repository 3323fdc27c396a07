"""Issue 12, items 2 and 3, with the real CLI processes: a long job's progress rides on the
heartbeat (seen changing while it runs, and no write of its own: counted with command
monitoring), and what each attempt logs (logging, structlog, print) is archived with its
execution, in order, cut and marked over the bound."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

from bench.stats import read_stats
from recruiter import Recruiter
from recruiter.domain.attempt import MAX_LOG_BYTES
from recruiter.domain.retry import RetryManyTimes
from recruiter.store import heartbeats_by_worker
from recruiter.store.monitoring import STATS_ENVVAR
from tests.conftest import wait_for
from tests.processes.conftest import FAST_WORKER, Proc, Processes
from tests.processes.test_cli_errors import run_cli
from tests.workables import AsyncChatty, Chatty, LogsThenHangs, Progressing

INTERVAL_S = 0.3  # FAST_WORKER's --heartbeat-interval
WRITES = ("insert", "update", "delete", "findAndModify")


def beats(db: Any) -> list[Any]:
    """Every roster entry's beat, read from the worker processes' heartbeat documents."""
    return list(heartbeats_by_worker(db.heartbeats).values())


def enqueue(db_uri: str, job: Any, timeout_s: float | None = None, retries: int = 0) -> Any:
    with Recruiter.connect(db_uri) as rec:
        builder = job.as_job_of(rec).retry_with(RetryManyTimes(retries, wait=0))
        if timeout_s:
            builder = builder.with_timeout(timeout_s)
        handle = rec.enqueue(builder)
    return getattr(handle, "id", handle)  # an id, or a handle carrying it


def writes(proc: Proc, stats_path: Path) -> dict[str, int]:
    """The process's writes so far, per collection (asked for with SIGUSR2, so as of now)."""
    asked = time.time()
    proc.signal(signal.SIGUSR2)
    snap = wait_for(lambda: (s := read_stats(stats_path)) is not None and s["written_at"] >= asked and s,
                    timeout_s=10, message="fresh command stats")
    out: dict[str, int] = {}
    for target, tally in snap["targets"].items():
        command, _, collection = target.partition(":")
        if command in WRITES:
            out[collection] = out.get(collection, 0) + tally["count"]
    return out


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after.keys() | before.keys()
            if after.get(k, 0) != before.get(k, 0)}


def run_counted(db: Any, db_uri: str, worker: Proc, stats: Path, job: Any,
                timeout_s: float | None = None) -> tuple[dict[str, int], float, list[Any]]:
    """Run ``job`` on the idle worker: its writes meanwhile, how long they were counted (the job's run
    and the wait for the slot to be idle again), and the progress values its heartbeat showed while
    it ran, in the order seen."""
    started = time.monotonic()  # before the first count: the time covers every beat counted
    before = writes(worker, stats)
    job_id = enqueue(db_uri, job, timeout_s)
    seen: list[Any] = []

    def archived() -> bool:
        beat = next((b for b in beats(db) if b.get("working_on") == job_id), None)
        if beat and beat.get("progress") and (not seen or seen[-1] != beat["progress"]):
            seen.append(beat["progress"])
        return db.archived.count_documents({"_id": job_id, "why": "done"}) == 1

    wait_for(archived, timeout_s=60, interval_s=0.02, message="the job archived done")
    wait_for(lambda: any(b.get("working_on") is None and b.get("progress") is None for b in beats(db)), timeout_s=10,
             message="the slot idle again, its progress gone")
    after = writes(worker, stats)
    # Up to the last count: the thread beats on while the slot is seen idle, and those beats are counted too.
    return delta(after, before), time.monotonic() - started, seen


def test_progress_rides_on_the_heartbeat_and_costs_no_write(
        processes: Processes, db: Any, db_uri: str, tmp_path: Path) -> None:
    stats = tmp_path / "worker.stats.json"
    processes.recruiter()
    worker = processes.start("worker", "worker", "start", *FAST_WORKER, "--id", "busy",
                             env={STATS_ENVVAR: str(stats)})
    # 60 s as the other process tests give a start: 30 s ran out at a load of 15 (nothing logged yet).
    wait_for(lambda: any(b["_id"] == "busy" for b in beats(db)), timeout_s=60, message="the worker registered")

    quiet, quiet_s, quiet_seen = run_counted(db, db_uri, worker, stats, Progressing(200, 0.015, report=False))
    loud, loud_s, loud_seen = run_counted(db, db_uri, worker, stats, Progressing(200, 0.015))
    child, child_s, child_seen = run_counted(db, db_uri, worker, stats, Progressing(200, 0.015), timeout_s=60)

    assert quiet_seen == []
    for seen in (loud_seen, child_seen):  # in a thread, and in a child process (a job with a timeout)
        assert len(seen) >= 3, f"the progress was seen changing while the job ran: {seen}"
        values = [p["value"] for p in seen]
        assert values == sorted(values)
        assert 0 < values[0] < values[-1] <= 1
        assert all(p["message"] == f"step {round(p['value'] * 200)} of 200" for p in seen)
    for counted, elapsed in ((quiet, quiet_s), (loud, loud_s), (child, child_s)):
        # Its own writes: the outcome, in the worker's roster entry; nothing in scheduled.
        assert counted.get("roster") == 1, counted
        assert "scheduled" not in counted, counted
        # The heartbeat's own beats only: one an interval, plus the early one showing the start.
        assert counted.get("heartbeats", 0) <= elapsed / INTERVAL_S + 3, (counted, elapsed)
        assert set(counted) <= {"roster", "heartbeats"}, counted
    # No more beats than the same job saying nothing, over the same time.
    for counted, elapsed in ((loud, loud_s), (child, child_s)):
        assert counted["heartbeats"] <= quiet["heartbeats"] * elapsed / quiet_s + 2, (counted, quiet)


def test_each_attempt_keeps_its_own_logs_in_order_and_a_long_log_is_cut(
        processes: Processes, db: Any, db_uri: str) -> None:
    processes.recruiter()
    worker = processes.worker("--id", "chatty", "--concurrency", "5")
    hangs = enqueue(db_uri, LogsThenHangs(), timeout_s=2)  # killed at its timeout: its child's lines kept
    in_thread = enqueue(db_uri, Chatty(succeed_on=3), retries=2)
    in_child = enqueue(db_uri, Chatty(succeed_on=3), timeout_s=60, retries=2)  # a timeout: a child process
    in_task = enqueue(db_uri, AsyncChatty(succeed_on=3), timeout_s=60, retries=2)
    long_log = enqueue(db_uri, Chatty(succeed_on=1, lines=3000, width=100))
    ids = [in_thread, in_child, in_task, long_log]
    wait_for(lambda: db.archived.count_documents({"_id": {"$in": ids}, "why": "done"}) == 4, timeout_s=60,
             message="the four jobs archived done")

    for job_id in (in_thread, in_child, in_task):
        doc = db.archived.find_one({"_id": job_id})
        executions = doc["executions"]
        assert [e["outcome"] for e in executions] == ["failed", "failed", "done"]
        assert [e["attempt"] for e in executions] == [1, 2, 3]
        for n, e in enumerate(executions, start=1):
            lines = e["logs"].splitlines()
            assert [line.split(" ", 1)[1] for line in lines] == [
                f"INFO    tests.chatty: logging says attempt {n}",
                f"WARNING structlog says attempt={n}",
                f"PRINT   stdout: print says attempt {n}",
                f"PRINT   stderr: stderr says attempt {n}",
            ], "each attempt's own lines, in the order logged"
            assert e.get("logs_cut", 0) == 0
            if n < 3:
                assert e["class"] == "builtins:RuntimeError"
                assert f"attempt {n} fails" in e["trace"]
        assert doc["last_execution"]["logs"] == executions[-1]["logs"]

    timed_out = wait_for(lambda: db.archived.find_one({"_id": hangs}), timeout_s=30, message="the hung job")
    e = timed_out["last_execution"]
    assert e["outcome"] == "timed-out"
    assert [line.split(" ", 1)[1] for line in e["logs"].splitlines()] == [
        "WARNING tests.hangs: about to hang, attempt 1", "PRINT   stdout: printed before hanging"]
    assert timed_out["executions"][-1]["logs"] == e["logs"]

    doc = db.archived.find_one({"_id": long_log})
    e = doc["last_execution"]
    assert len(e["logs"].encode()) <= MAX_LOG_BYTES
    assert e["logs_cut"] > 3000 * 100 - MAX_LOG_BYTES
    lines = e["logs"].splitlines()
    assert lines[-1].endswith(f"stdout: {2999:06d} " + "x" * 100), "the newest lines are kept"
    assert all(" PRINT   stdout: " in line for line in lines), "cut on a line boundary"
    assert doc["executions"][-1]["logs_cut"] == e["logs_cut"]
    the_worker_logs_one_json_document_per_line_whatever_its_jobs_print(worker, in_thread, in_child, in_task, long_log)


def the_worker_logs_one_json_document_per_line_whatever_its_jobs_print(
        worker: Proc, in_thread: Any, in_child: Any, in_task: Any, long_log: Any) -> None:
    """Issue 41: in JSON mode a job's prints and log records are JSON events with its job id and
    attempt (a child's lines too, logged by the worker), and its INFO records are kept."""
    docs = []
    for n, line in enumerate(worker.log().splitlines()):
        try:
            docs.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"line {n + 1} of the worker's output is not JSON: {line!r}") from None

    def said(job_id: Any, n: int) -> list[dict[str, Any]]:
        return [d for d in docs if d.get("job_id") == str(job_id) and d.get("attempt") == n]

    for n in (1, 2, 3):
        for job_id in (in_thread, in_task):  # in the worker: its own events
            mine = said(job_id, n)
            assert {("job.output", "stdout", f"print says attempt {n}"),
                    ("job.output", "stderr", f"stderr says attempt {n}")} <= {
                (d["event"], d.get("stream"), d.get("line")) for d in mine}, mine
            assert any(d["event"] == f"logging says attempt {n}" and d["level"] == "info"
                       and d["logger"] == "tests.chatty" for d in mine), mine
            assert any(d["event"] == "structlog says" and d["level"] == "warning" for d in mine), mine
        child = [d.get("line", "") for d in said(in_child, n) if d["event"] == "job.output" and d["stream"] == "child"]
        assert any(line.endswith(f"PRINT   stdout: print says attempt {n}") for line in child), child
        assert any(line.endswith(f"INFO    tests.chatty: logging says attempt {n}") for line in child), child
    printed = [d for d in said(long_log, 1) if d["event"] == "job.output"]
    assert len(printed) == 3000 + 2, "every printed line is logged, not only what the execution keeps"


def test_the_handle_and_jobs_show_see_the_progress_change_and_then_the_logs(
        processes: Processes, db: Any, db_uri: str) -> None:
    processes.recruiter()
    processes.worker("--id", "shown")
    with Recruiter.connect(db_uri) as rec:
        handle = rec.enqueue(Progressing(100, 0.1).as_job_of(rec))
        first = wait_for(lambda: handle.refresh().progress, timeout_s=30, message="the handle sees progress")
        assert handle.state == "running"
        assert handle.worker == "shown"
        shown = []
        for _ in range(2):
            out = run_cli("jobs", "show", str(handle), "--target", db_uri)
            assert out.returncode == 0, out.stderr
            shown.append(next(line for line in out.stdout.splitlines() if line.startswith("progress")))
        later = wait_for(lambda: (p := handle.refresh().progress) and p.value > first.value and p,
                         timeout_s=30, message="the handle sees the progress change")
        assert later.message == f"step {round(later.value * 100)} of 100"
        assert shown[0] != shown[1], "jobs show saw the progress change"
        assert all(" of 100 (at " in line for line in shown)
        assert handle.wait(timeout=60) == 100
    with Recruiter.connect(db_uri) as rec:
        chatty = rec.enqueue(Chatty(succeed_on=2).as_job_of(rec).retry_with(RetryManyTimes(1, wait=0)))
        assert chatty.wait(timeout=60) == 2
        rec_logs = [e.get("logs", "") for e in chatty.executions]
    logged = run_cli("jobs", "show", str(chatty), "--target", db_uri)
    assert logged.returncode == 0, logged.stderr
    text = logged.stdout
    first_at, second_at = text.index("print says attempt 1"), text.index("print says attempt 2")
    assert first_at < second_at, "each attempt's logs, in order"
    assert text.index("attempt 1 fails") < second_at
    assert len(rec_logs) == 2
    assert all(f"structlog says attempt={n}\n" in logs for n, logs in enumerate(rec_logs, start=1))
