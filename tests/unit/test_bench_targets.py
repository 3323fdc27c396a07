"""The targets of issue 14 as bench.report judges them from a result document: one line each,
met or missed against its limit, 'not measured' for worker counts the run did not have."""

from __future__ import annotations

from typing import Any

from bench.report import markdown, targets


def point(noop: float, sleep: float, p50: float, rt: float = 3.0, empty: float = 1.0,
          writes: float = 1.0) -> dict[str, Any]:
    return {"noop": {"jobs_per_s": noop, "per_job": {"all": {"round_trips": rt, "empty_getmores": empty}},
                     "worker_path": {"reads": 1.0, "writes": writes}},
            "sleep100": {"jobs_per_s": sleep}, "latency": {"p50_ms": p50, "p95_ms": p50},
            "idle": {"worker_requests_per_s": 1.0}, "memory": {"worker_rss_kib": 1024}}


def doc() -> dict[str, Any]:
    return {"reference": {"notification": {"p50_ms": 2.0}},
            "results": {"recruiter": {"1": point(90, 9.5, 7.0), "8": point(100, 75, 9.0),
                                      "16": point(120, 120, 8.0, rt=3.5, empty=1.6, writes=1.5)},
                        "v1": {"1": point(80, 9, 300), "8": point(110, 60, 200), "16": point(40, 20, 100)}}}


def by_name(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f"{t['target']} {t['design']}": t for t in rows}


def test_each_target_is_judged_against_its_limit() -> None:
    t = by_name(targets(doc()))
    assert t["no-op throughput >= v1 at 1 worker(s) recruiter"]["met"] is True
    assert t["no-op throughput >= v1 at 8 worker(s) recruiter"]["met"] is False
    assert t["no-op throughput >= v1 at 2 worker(s) recruiter"]["met"] is None  # not in this run
    ideal8 = t["100 ms jobs >= 0.9 of ideal (W x 10 jobs/s) at 8 workers recruiter"]
    assert (ideal8["measured"], ideal8["met"]) == (75 / 80, True)
    assert t["100 ms jobs >= 0.8 of ideal (W x 10 jobs/s) at 16 workers recruiter"]["met"] is False
    rt = t["round trips per job at 16 workers <= 2.0 (empty getMore replies apart) recruiter"]
    assert (rt["measured"], rt["met"]) == (3.5 - 1.6, True)
    assert "3.50 counting" in rt["note"]
    latency = t["latency p50 with idle workers <= 4x the server's notification latency recruiter"]
    assert (latency["measured"], latency["met"]) == (9.0 / 2.0, False)  # the worst worker count
    assert t["worker path <= 1 write per job recruiter"]["met"] is False
    assert t["worker path <= 2 reads per job recruiter"]["met"] is True
    assert "v1" not in {row["design"] for row in targets(doc())}


def test_the_markdown_has_a_row_per_point_and_a_line_per_target() -> None:
    d = doc()
    d["targets"] = targets(d)
    text = markdown(d)
    assert text.count("\n| recruiter | ") == 3
    assert text.count("\n| v1 | ") == 3
    assert "| **missed** |" in text
    assert "| not measured |" in text
