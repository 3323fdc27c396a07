"""``bin/bench --round-reads`` at its tiniest: every layout measured, one after another, with sane figures.

A smoke test of the harness, not a measurement: nothing here depends on how fast anything is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def test_round_reads_series_reports_reads_per_round_for_every_layout(server_uri: str, tmp_path: Path) -> None:
    env = {**os.environ, "RECRUITER_TEST_MONGODB_URI": server_uri, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "bench.run", "--quick", "--round-reads", "--round-reads-layouts",
                             "1x1,1x2", "--round-reads-rate", "5", "--window", "2", "--no-plot",
                             "--output", str(tmp_path)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "round reads per committed round at 5 jobs/s" in result.stdout
    assert "document writes per job: lock" in result.stdout

    doc = json.loads((tmp_path / "latest.json").read_text())
    assert doc["results"] == {}
    assert doc["capacity"] is None
    assert doc["backlog"] is None
    series = doc["round_reads"]
    assert series["rate"] == 5
    assert series["window_s"] == 2
    layouts = series["layouts"]
    assert [(r["processes"], r["concurrency"], r["slots"]) for r in layouts] == [(1, 1, 1), (1, 2, 2)]
    for row in layouts:
        assert row["seconds"] >= 2
        assert row["jobs"] > 0, row
        # Jobs went in at the pace asked for, not as a backlog (the readings at the window's start take time too).
        assert row["enqueued"] <= 2 * 5 * (series["warm_up_s"] + row["seconds"]) + 5
        assert row["rounds"] > 0
        per_round = row["per_round"]
        assert per_round["round_trips"] >= 1
        # Every round reads what changed in the roster (the entries holding an outcome, the entries freed):
        # two finds at once, which may find nothing (the entries it gives work to, it has kept since).
        assert per_round["documents"] > 0
        assert per_round["targets"]["find:roster"]["round_trips"] >= 1
        assert per_round["kib_received"] > 0
        assert abs(sum(t["reply_bytes"] for t in per_round["targets"].values()) - per_round["reply_bytes"]) < 1e-6
        # Idle rounds only add rounds: per round with them, no more documents than per committed round.
        assert row["per_round_with_idle"]["documents"] <= per_round["documents"]
        kinds = row["writes_per_job"]["kinds"]
        for kind in ("lock", "assign", "archive", "delete", "outcome", "enqueue"):
            assert kinds[kind] > 0, (kind, kinds)
        assert row["writes_per_job"]["sources"]["recruiter update:scheduled"] == kinds["lock"]
    first, second = layouts
    assert first["ratio_to_first"]["documents"] == 1
    assert second["ratio_to_first"]["documents"] == second["per_round"]["documents"] / first["per_round"]["documents"]


def test_round_reads_series_runs_a_baseline_checkout_first_and_prints_both_side_by_side(
        server_uri: str, tmp_path: Path) -> None:
    """``--round-reads-baseline-code``: the series with another checkout's code first (here a copy
    of this one's packages), in the same run, then this code, then both documents per round side
    by side."""
    base = tmp_path / "base"
    for package in ("recruiter", "bench"):
        shutil.copytree(REPO / package, base / package, ignore=shutil.ignore_patterns("__pycache__", "results"))
    # The copy's package leaves a mark when a process imports it.
    with (base / "recruiter" / "__init__.py").open("a") as init:
        init.write("\nimport pathlib as _p\n(_p.Path(__file__).parent.parent / 'imported').touch()\n")
    out = tmp_path / "out"
    env = {**os.environ, "RECRUITER_TEST_MONGODB_URI": server_uri, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "bench.run", "--quick", "--round-reads", "--round-reads-layouts",
                             "1x1", "--round-reads-rate", "5", "--window", "2", "--no-plot",
                             "--round-reads-baseline-code", str(base), "--output", str(out)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"code of {base}" in result.stdout
    assert "documents per committed round, side by side" in result.stdout
    doc = json.loads((out / "latest.json").read_text())
    before, after = doc["round_reads_baseline"], doc["round_reads"]
    assert str(base) in before["code"]
    assert after["code"] is None
    assert before["layouts"][0]["jobs"] > 0
    assert after["layouts"][0]["jobs"] > 0
    assert (base / "imported").exists()  # the baseline's processes ran the copy's code
