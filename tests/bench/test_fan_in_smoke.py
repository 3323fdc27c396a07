"""``python -m bench.fan_in --quick`` runs both series and prints their figures and ratios.

A smoke test of the harness, not a measurement: nothing here depends on how fast anything is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO


def test_fan_in_runs_the_plain_and_fan_in_series(server_uri: str) -> None:
    env = {**os.environ, "RECRUITER_TEST_MONGODB_URI": server_uri, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "bench.fan_in", "--quick"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    plain, fan = doc["results"]["plain"], doc["results"]["fan-in"]
    assert plain["parts"] == fan["parts"] == 50
    assert plain["jobs_per_s"] > 0
    assert fan["jobs_per_s"] > 0
    assert plain["release_writes_per_part"] == 0
    # Each part's archive pulls it from the dependent in the round that archives it: one release
    # write per round at most, so never more than one per part.
    assert 0 < fan["release_writes_per_part"] <= 1
    assert fan["release_latency_s"] >= 0
    assert doc["ratios"]["jobs_per_s"] > 0
    assert "loaded machine" in done.stdout
