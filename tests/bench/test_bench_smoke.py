"""``bin/bench --quick`` runs end to end and writes a result document with sane figures.

A smoke test of the measuring harness, not a measurement: nothing here depends
on how fast anything is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def _bench(server_uri: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RECRUITER_TEST_MONGODB_URI": server_uri, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "bench.run", "--quick", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_quick_bench_writes_results(server_uri: str, tmp_path: Path) -> None:
    result = _bench(server_uri, "--workers", "1", "--backlogs", "none", "--capacity-layout", "none", "--no-peers",
                    "--output", str(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "targets of issue 14" in result.stdout

    doc = json.loads((tmp_path / "latest.json").read_text())
    assert set(doc) == {"meta", "reference", "results", "capacity", "capacity_baseline", "targets", "backlog",
                        "peers", "round_reads", "round_reads_baseline"}
    assert doc["round_reads"] is None
    assert doc["capacity_baseline"] is None
    assert doc["capacity"] is None
    assert doc["peers"] is None  # --no-peers (tests/bench/test_peers_smoke.py runs them)
    assert doc["backlog"] is None
    assert doc["reference"]["raw"]["job_life_ceiling_per_s"] > 0
    assert doc["reference"]["notification"]["p50_ms"] > 0
    assert "v1" in doc["results"]
    assert any(name.startswith("recruiter") for name in doc["results"])
    for design, by_count in doc["results"].items():
        r = by_count["1"]
        for kind in ("noop", "sleep100"):
            window = r[kind]
            assert window["jobs"] > 0, (design, kind)
            # The window lasted as long as asked, and the feeder kept jobs waiting through it.
            assert window["seconds"] >= doc["meta"]["sizes"]["window_s"], (design, kind)
            assert window["jobs_per_s"] == window["jobs"] / window["seconds"]
            assert window["min_outstanding"] > 0, (design, kind)
            assert window["enqueued"] >= window["high"]
            # Every job costs the worker at least one round trip; the jobs counted were enqueued by the feeder.
            assert window["per_job"]["worker"]["round_trips"] >= 1, (design, kind)
            assert window["enqueued"] >= window["jobs"]
            everything = window["per_job"]["all"]
            assert 0 <= everything["empty_getmores"] <= everything["reads"] <= everything["round_trips"]
            assert window["worker_path"]["writes"] >= 0
        assert r["latency"]["samples"] == len(r["latency"]["values_ms"]) > 0
        assert r["latency"]["p50_ms"] <= r["latency"]["p95_ms"] <= r["latency"]["p99_ms"]
        # The quick idle window (2.5 s) is longer than a change stream's wait (2 s) and than
        # the poll backoff's longest gap, so an idle worker asks at least once in it.
        assert r["idle"]["worker_requests_per_s"] > 0
        assert r["memory"]["worker_rss_kib"] > 0
        if design != "v1":
            assert r["noop"]["per_job"]["recruiter"]["round_trips"] > 0
            # The product's worker writes each job's outcome and reads each job (the figure itself is
            # judged by the targets, not here).
            assert r["noop"]["worker_path"]["writes"] > 0.5
            assert r["noop"]["worker_path"]["reads"] > 0
    targets = doc["targets"]
    assert all({"target", "measured", "limit", "met"} <= set(t) for t in targets)
    at_one = next(t for t in targets if t["target"] == "no-op throughput >= v1 at 1 worker(s)")
    assert at_one["met"] in (True, False)
    # Worker counts not in this run are reported as not measured, not judged.
    assert next(t for t in targets if t["target"] == "no-op throughput >= v1 at 16 worker(s)")["met"] is None
    assert list(tmp_path.glob("*.png"))
    markdown = subprocess.run([sys.executable, "-m", "bench.report", str(tmp_path / "latest.json")], cwd=REPO,
                              capture_output=True, text=True, timeout=60, check=True).stdout
    assert "| v1 | 1 |" in markdown
    assert "| no-op throughput >= v1 at 1 worker(s) |" in markdown


def test_workers_can_run_several_to_a_process(server_uri: str, tmp_path: Path) -> None:
    result = _bench(server_uri, "--workers", "2", "--slots-per-process", "2", "--designs", "recruiter",
                    "--backlogs", "none", "--capacity-layout", "none", "--no-peers", "--no-plot",
                    "--output", str(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "1 process(es) x --concurrency 2" in result.stderr
    assert "recruiter (2/process)" in result.stdout
    doc = json.loads((tmp_path / "latest.json").read_text())
    assert doc["meta"]["designs"][0]["slots_per_process"] == 2
    assert doc["results"]["recruiter"]["2"]["sleep100"]["jobs"] > 0

    uneven = _bench(server_uri, "--workers", "3", "--slots-per-process", "2", "--no-peers", "--output", str(tmp_path))
    assert uneven.returncode == 2
    assert "3 workers do not split into processes of 2" in uneven.stderr


def test_quick_capacity_of_one_leader(server_uri: str, tmp_path: Path) -> None:
    result = _bench(server_uri, "--capacity", "--capacity-layout", "2x2", "--no-plot", "--output", str(tmp_path),
                    "--capacity-baseline-args", "--round-size 2")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "capacity of one leader: 2 worker processes x --concurrency 2 = 4 slots" in result.stdout
    # The baseline's options measured first, then the run's, side by side with the ratios.
    assert "capacity of one leader, 4 slots, side by side in one run:" in result.stdout
    assert "--round-size 2" in result.stdout

    doc = json.loads((tmp_path / "latest.json").read_text())
    assert doc["results"] == {}
    assert doc["backlog"] is None
    assert doc["capacity_baseline"]["recruiter_args"] == ["--round-size", "2"]
    assert doc["capacity_baseline"]["jobs"] > 0
    c = doc["capacity"]
    assert c["slots"] == 4
    assert c["jobs"] > 0
    assert c["jobs_per_s"] > 0
    assert c["min_outstanding"] > c["slots"] * c["lanes"]  # jobs were waiting all through the window
    # The recruiter's own round timings (RECRUITER_ROUND_STATS) cover the window.
    assert c["rounds"] > 0
    assert c["rounds_per_s"] > 0
    assert 0 < c["assigned_per_round"] <= c["slots"] * c["lanes"]
    assert c["ms_per_round"]["plan"] > 0
    # Every round reads the roster and the free entries' heartbeats; they are timed apart.
    assert c["ms_per_round"]["read_roster"] > 0
    assert c["ms_per_round"]["read_beats"] > 0
    assert "read_roster" in c["idle_ms_per_round"] or c["idle_rounds"] == 0
    assert c["ms_per_round"]["commit"] > 0
    assert abs(sum(c["share"].values()) - 1) < 1e-6
    assert c["recruiter_round_trips_per_round"] > 0
    assert c["cpu"]["recruiter"] > 0
    # The documents each kind of write wrote per job, from the write replies.
    writes = c["writes_per_job"]
    for kind in ("lock", "assign", "archive", "delete", "outcome"):
        assert writes["kinds"][kind] > 0, (kind, writes)
    assert writes["sources"]["recruiter delete:scheduled"] == writes["kinds"]["delete"]
    assert "document writes per job: lock" in result.stdout
    assert "document writes per job: assign" in result.stdout  # a row of the side-by-side table
    # The retryable writes per job, per process kind: the worker's writes of each job are none.
    retryable = c["retryable_per_job"]
    assert set(retryable) >= {"recruiter", "worker", "producer", "all"}
    assert retryable["worker"] < 0.1, retryable
    assert "retryable writes per job (all processes)" in result.stdout


def test_quick_backlog_series_has_every_size_side_by_side(server_uri: str, tmp_path: Path) -> None:
    result = _bench(server_uri, "--only-backlog", "--no-plot", "--output", str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "backlog series" in result.stdout
    assert "throughput(200) / throughput(60)" in result.stdout

    backlog = json.loads((tmp_path / "latest.json").read_text())["backlog"]
    assert sorted(int(s) for s in backlog["sizes"]) == [60, 200]
    for size, row in backlog["sizes"].items():
        assert row["queued"] == int(size)
        assert row["setup_s"] > 0
        assert row["first_round_s"] > 0
        # The measured jobs were archived while the rest of the backlog stayed queued.
        assert row["jobs"] >= backlog["measured_jobs"]
        assert row["queued_after"] >= 0
        assert row["jobs_per_s"] > 0
        assert row["rounds"] > 0
        assert row["s_per_round"] > 0
        assert row["finds_per_round"] > 0
        assert row["documents_per_round"] > 0
        assert row["lease_taken_again"] >= 0
        assert row["leader_lost_lines"] >= 0
    assert backlog["ratio"] > 0
    assert isinstance(backlog["lease_never_lost"], bool)


def test_the_designs_run_beside_an_earlier_checkouts_code(server_uri: str, tmp_path: Path) -> None:
    """--designs-baseline-code runs the first design first with another checkout's code, in the same run."""
    result = _bench(server_uri, "--designs", "recruiter", "--workers", "1", "--backlogs", "none",
                    "--capacity-layout", "none", "--no-peers", "--no-plot", "--output", str(tmp_path),
                    "--designs-baseline-code", str(REPO))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    doc = json.loads((tmp_path / "latest.json").read_text())
    assert list(doc["results"]) == ["baseline", "recruiter"]
    assert [d["name"] for d in doc["meta"]["designs"]] == ["baseline", "recruiter"]
    assert doc["meta"]["designs"][0]["code"] == str(REPO)
    assert doc["meta"]["designs"][1]["code"] is None
    for design in ("baseline", "recruiter"):
        assert doc["results"][design]["1"]["latency"]["samples"] > 0
    assert "baseline" in result.stdout
