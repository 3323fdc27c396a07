"""``python -m bench.dashboard_cost`` runs end to end at a tiny size and prints the bytes of each overview view
beside its round trips and documents. A smoke test of the script, not a measurement."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO


def test_dashboard_cost_prints_the_pages_and_the_overview_at_many_groups(server_uri: str) -> None:
    env = {**os.environ, "RECRUITER_TEST_MONGODB_URI": server_uri, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "bench.dashboard_cost", "--queued", "20", "--archived", "20",
                             "--tenants", "2", "--tabs", "1", "--seconds", "0.5", "--groups", "30",
                             "--group-tenants", "2"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "30 groups x 2 tenants (60 pairs)" in result.stdout
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines() if line.startswith("/overview/live")}
    assert set(rows) >= {"/overview/live", "/overview/live?page=2", "/overview/live?tenants=g00001"}
    assert all(r[1] == "200" and int(r[2]) > 0 for r in rows.values())
