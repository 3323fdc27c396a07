"""The "Progress and logs" guide's example (docs/guide/progress-and-logs.md) runs as written:
its progress is reported and what it logs is captured."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import types
from pathlib import Path

from recruiter.domain.workable import JobContext
from recruiter.processes.worker.capture import LogBuffer, capturing, ensure_installed
from tests.conftest import REPO
from tests.processes.test_readme import readme_files


def section_code() -> str:
    text = (REPO / "docs" / "guide" / "progress-and-logs.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if not b.startswith("# app_logging.py")]
    assert len(blocks) == 1
    return str(blocks[0])


def test_the_progress_and_logs_example_runs_as_written() -> None:
    module = types.ModuleType("readme_jobs")
    exec(compile(section_code(), "progress-and-logs.md", "exec"), module.__dict__)
    said: list[tuple[float | None, str | None]] = []
    ctx = JobContext("j", 1, "w", "g", reporter=lambda v, m: said.append((v, m)))
    ensure_installed()
    logs = LogBuffer()
    with capturing(logs):
        assert module.CopyFiles(["a.csv", "b.csv"]).execute(ctx) == 2
    assert said == [(0.5, "copied 1 of 2 files"), (1.0, "copied 2 of 2 files")]
    lines = [line.split(" ", 1)[1] for line in logs.text()[0].splitlines()]
    assert lines == ["INFO    readme_jobs: copying a.csv", "INFO    readme_jobs: copying b.csv",
                     "PRINT   stdout: all done"]


def test_the_guides_logging_setup_routes_recruiters_logs_through_the_applications_handlers(tmp_path: Path) -> None:
    """app_logging.py, then lines logged as recruiter's library code logs them (structlog.get_logger):
    they come out of the application's logging handler, as its formatter renders them, at its level."""
    (tmp_path / "app_logging.py").write_text(readme_files()["app_logging.py"])
    script = ("import app_logging, structlog\n"
              "structlog.get_logger('recruiter.producer').info('wait.polling', jobs=3)\n"
              "structlog.get_logger('recruiter.producer').debug('hidden below INFO')\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         check=True)
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    doc = json.loads(lines[0])
    assert (doc["event"], doc["jobs"], doc["logger"], doc["level"]) == ("wait.polling", 3, "recruiter.producer", "info")
