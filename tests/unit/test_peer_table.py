"""The peer table of ``bin/bench`` (bench/peers/table.py) from a result document: figures, ratios, gaps."""

from __future__ import annotations

from typing import Any

from bench.peers.table import commands_per_job, markdown, rows, table


def _point(noop: float, *, per_job: dict[str, float] | None = None, p50: float = 40.0) -> dict[str, Any]:
    kinds = per_job or {"worker": 3.0, "recruiter": 2.0, "cleaner": 0.5, "enqueue": 0.25}
    return {"noop": {"jobs_per_s": noop, "per_job": {k: {"round_trips": v} for k, v in kinds.items()}
                     | {"all": {"round_trips": sum(kinds.values())}}},
            "sleep100": {"jobs_per_s": 9.0}, "latency": {"p50_ms": p50, "p95_ms": 2 * p50},
            "idle": {"worker_requests_per_s": 2.0}, "memory": {"worker_rss_kib": 46 * 1024}}


def _doc(agenda_point: dict[str, Any], kill: dict[str, Any] | None = None) -> dict[str, Any]:
    kill = kill if kill is not None else {
        "recruiter": {"jobs": 8, "lost": 0, "twice": 0, "rerun": 1, "recovered_s": 8.0},
        "agenda": {"jobs": 8, "lost": 1, "twice": 2, "rerun": 1, "recovered_s": 4.0}}
    return {"meta": {"workers": [1]}, "results": {"recruiter": {"1": _point(20.0)}},
            "peers": {"design": "recruiter", "kill": kill,
                      "series": {"agenda": {"versions": {"agenda": "6.2.6"}, "results": {"1": agenda_point}}}}}


def _by_figure(doc: dict[str, Any]) -> dict[str, list[str]]:
    return {row[0]: row[1:] for row in rows(doc, "recruiter")}


def test_commands_per_job_leave_the_enqueuer_out() -> None:
    assert commands_per_job(_point(1.0)["noop"]) == 5.5
    assert commands_per_job({"per_job": {}}) is None


def test_rows_put_both_systems_side_by_side_with_the_ratio() -> None:
    got = _by_figure(_doc(_point(5.0, per_job={"worker": 11.0, "enqueue": 1.0}, p50=20.0)))
    assert got["no-op jobs/s, 1 worker(s)"] == ["20.0", "5.0", "4.00"]
    assert got["enqueue-to-start p50 ms, 1 worker(s)"] == ["40", "20", "2.00"]
    assert got["commands per no-op job (all but the enqueuer), 1 worker(s)"] == ["5.5", "11.0", "0.50"]
    assert got["worker resident memory MiB, 1 worker(s)"] == ["46", "46", "1.00"]
    assert got["jobs run twice after one SIGKILLed worker"] == ["0 of 8", "2 of 8", ""]
    assert got["jobs lost after one SIGKILLed worker"] == ["0 of 8", "1 of 8", ""]
    assert got["seconds from the SIGKILL to the last job finished"] == ["8.0", "4.0", "2.00"]


def test_a_failed_phase_shows_as_a_gap_not_a_crash() -> None:
    stalled = _point(5.0)
    stalled["noop"] = {"error": "agenda x2 noop: timed out"}
    stalled["latency"] = {"error": "agenda x2: timed out waiting for a latency job"}
    got = _by_figure(_doc(stalled))
    assert got["no-op jobs/s, 1 worker(s)"] == ["20.0", "-", "-"]
    assert got["enqueue-to-start p95 ms, 1 worker(s)"] == ["80", "-", "-"]
    assert got["100 ms jobs/s, 1 worker(s)"] == ["9.0", "9.0", "1.00"]


def test_without_agenda_the_table_shows_the_recruiter_and_why() -> None:
    doc = _doc({}, kill={"recruiter": {"jobs": 8, "lost": 0, "twice": 0, "rerun": 1, "recovered_s": 8.0}})
    doc["peers"]["series"] = {}
    doc["peers"]["agenda_skipped"] = "node and npm not found on PATH"
    text = table(doc, "recruiter")
    assert "Agenda skipped: node and npm not found on PATH" in text
    assert all(len(row) == 2 for row in rows(doc, "recruiter"))
    assert "| no-op jobs/s, 1 worker(s) | 20.0 |" in markdown(doc)


def test_celery_beside_agenda_at_one_worker_with_its_long_queue_and_its_kill() -> None:
    doc = _doc(_point(5.0))
    celery = _point(40.0, per_job={"worker": 2.0}, p50=100.0)
    del celery["sleep100"]  # Celery runs no-op tasks only
    celery["noop_long"] = {"jobs_per_s": 4.0, "per_job": {"worker": {"round_trips": 2.0}, "all": {"round_trips": 2.0}}}
    doc["peers"]["series"]["celery"] = {
        "versions": {"celery": "5.7.0", "kombu": "5.7.0", "pymongo": "4.20.1"},
        "settings": {"polling_interval_s": 0.1, "long_queue": 2000},
        "guarantee": "at most once on a crash: a message is deleted when fetched", "results": {"1": celery}}
    doc["peers"]["kill"]["celery"] = {"jobs": 8, "lost": 1, "twice": 0, "rerun": 0, "recovered_s": None}
    got = _by_figure(doc)
    assert got["no-op jobs/s, 1 worker(s)"] == ["20.0", "5.0", "4.00", "40.0", "0.50"]
    assert got["100 ms jobs/s, 1 worker(s)"] == ["9.0", "9.0", "1.00", "-", "-"]
    # The long queue: Celery's alone; the rows are left out where no system measured them.
    assert got["no-op jobs/s, long queue, 1 worker(s)"] == ["-", "-", "-", "4.0", "-"]
    assert got["commands per no-op job, long queue, 1 worker(s)"] == ["-", "-", "-", "2.0", "-"]
    assert got["jobs lost after one SIGKILLed worker"] == ["0 of 8", "1 of 8", "", "1 of 8", ""]
    assert got["seconds from the SIGKILL to the last job finished"] == ["8.0", "4.0", "2.00", "-", "-"]
    text = table(doc, "recruiter")
    assert "Celery 5.7.0 on kombu 5.7.0's MongoDB transport" in text
    assert "delivery: at most once on a crash" in text
    del doc["peers"]["series"]["celery"]
    assert "no-op jobs/s, long queue, 1 worker(s)" not in _by_figure(doc)
