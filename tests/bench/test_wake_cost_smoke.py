"""``python -m bench.wake_cost`` runs its series and prints their figures and ratios.

A smoke test of the harness, not a measurement: nothing here depends on how fast anything is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO


def _run(server_uri: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RECRUITER_TEST_MONGODB_URI": server_uri, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "bench.wake_cost", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_wake_cost_runs_the_packed_and_idle_series(server_uri: str) -> None:
    done = _run(server_uri, "--processes", "2", "--packed", "2", "--series", "packed,idle", "--quick")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    ((label, figures),) = doc["results"].items()
    assert label.startswith("this code")
    assert figures["packed"]["jobs_per_s"] > 0
    assert figures["packed"]["of_ideal"] > 0
    assert figures["packed"]["worker_requests_per_job"] >= figures["packed"]["worker_reads_per_job"] > 0
    assert "reads of their entries" in done.stdout
    assert figures["idle"]["worker_requests_per_s"] > 0
    assert figures["idle"]["latency_p50_ms"] > 0
    assert "loaded machine" in done.stdout


def test_wake_cost_refuses_a_layout_that_does_not_split_in_one_line(server_uri: str) -> None:
    done = _run(server_uri, "--processes", "4", "--packed", "3")
    assert done.returncode == 2
    assert "3 does not divide 4" in done.stderr
    assert "Traceback" not in done.stderr
