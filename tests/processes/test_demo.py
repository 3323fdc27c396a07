"""``bin/demo`` runs to its summary and leaves nothing running."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import REPO, free_port


def test_demo_runs_to_its_summary(tmp_path: Path) -> None:
    env = {**os.environ, "RECRUITER_DEMO_DIR": str(tmp_path / "demo")}
    for var in ("RECRUITER_MONGODB_URI", "MONGODB_URI"):
        env.pop(var, None)
    result = subprocess.run([str(REPO / "bin" / "demo"), "--port", str(free_port())], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "== summary" in out
    assert "60 jobs enqueued and archived" in out
    assert "tried-too-many-times=4" in out
    assert "non-retriable-exception=3" in out
    assert "Everything the demo started has been stopped" in out
    assert "mongosh" in out
    pids = tmp_path / "demo" / "pids.json"
    assert not pids.exists() or pids.read_text().strip() in ("", "[]", "{}"), pids.read_text()
