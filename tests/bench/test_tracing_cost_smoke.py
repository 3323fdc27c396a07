"""``python -m bench.tracing_cost`` runs its three setups and prints them side by side.

A smoke test of the harness, not a measurement: nothing here depends on how fast anything is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO


def test_tracing_cost_runs_every_setup(server_uri: str) -> None:
    env = {**os.environ, "RECRUITER_TEST_MONGODB_URI": server_uri, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "bench.tracing_cost", "--jobs", "5", "--rounds", "1",
                           "--micro", "50"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines[2:5]] == ["none", "api", "sdk"]
    runs = json.loads(lines[-1])["runs"]
    # Only the setups with OpenTelemetry store a context; the first never imported it.
    assert {kind: [r["stored"] for r in rs] for kind, rs in runs.items()} == {
        "none": [False], "api": [True], "sdk": [True]}
    assert {kind: rs[0]["ran"] for kind, rs in runs.items()} == {"none": 5, "api": 5, "sdk": 5}
    assert runs["none"][0]["otel_imported"] is False
