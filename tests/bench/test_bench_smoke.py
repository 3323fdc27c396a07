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


def test_quick_bench_writes_results(server_uri: str, tmp_path: Path) -> None:
    env = {**os.environ, "RECRUITER_TEST_MONGODB_URI": server_uri, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--workers", "1", "--output", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "targets of issue 5" in result.stdout

    doc = json.loads((tmp_path / "latest.json").read_text())
    assert set(doc) == {"meta", "reference", "results", "targets", "backlog"}
    assert doc["reference"]["raw"]["job_life_ceiling_per_s"] > 0
    assert doc["reference"]["notification"]["p50_ms"] > 0
    assert "v1" in doc["results"]
    assert any(name.startswith("recruiter") for name in doc["results"])
    for design, by_count in doc["results"].items():
        r = by_count["1"]
        for kind in ("noop", "sleep100"):
            assert r[kind]["jobs"] > 0, (design, kind)
            assert r[kind]["jobs_per_s"] > 0, (design, kind)
            # Every job costs the worker at least one round trip, and enqueueing costs some.
            assert r[kind]["per_job"]["worker"]["round_trips"] >= 1, (design, kind)
            assert r[kind]["per_job"]["enqueue"]["round_trips"] > 0, (design, kind)
            assert r[kind]["per_job"]["all"]["request_bytes"] > 0, (design, kind)
        assert r["latency"]["samples"] == len(r["latency"]["values_ms"]) > 0
        assert r["latency"]["p50_ms"] <= r["latency"]["p95_ms"] <= r["latency"]["p99_ms"]
        # The quick idle window (2.5 s) is longer than a change stream's wait (2 s) and than
        # the poll backoff's longest gap, so an idle worker asks at least once in it.
        assert r["idle"]["worker_requests_per_s"] > 0
        assert r["memory"]["worker_rss_kib"] > 0
        if design != "v1":
            assert r["noop"]["per_job"]["recruiter"]["round_trips"] > 0
    assert doc["targets"]
    assert all({"target", "measured", "limit", "ratio", "met"} <= set(t) for t in doc["targets"])
    assert list(tmp_path.glob("*.png"))


def test_quick_backlog_series_has_every_size_side_by_side(server_uri: str, tmp_path: Path) -> None:
    env = {**os.environ, "RECRUITER_TEST_MONGODB_URI": server_uri, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--only-backlog", "--no-plot", "--output", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
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
