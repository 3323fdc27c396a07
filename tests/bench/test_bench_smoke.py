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
    assert set(doc) == {"meta", "reference", "results", "targets"}
    assert doc["reference"]["raw"]["job_life_ceiling_per_s"] > 0
    assert doc["reference"]["notification"]["p50_ms"] > 0
    assert "v1" in doc["results"] and any(name.startswith("recruiter") for name in doc["results"])
    for design, by_count in doc["results"].items():
        r = by_count["1"]
        for kind in ("noop", "sleep100"):
            assert r[kind]["jobs"] > 0 and r[kind]["jobs_per_s"] > 0, (design, kind)
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
    assert doc["targets"] and all({"target", "measured", "limit", "ratio", "met"} <= set(t) for t in doc["targets"])
    assert list(tmp_path.glob("*.png"))
