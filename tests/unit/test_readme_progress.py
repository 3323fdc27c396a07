"""The "Progress and logs" guide's example (docs/guide/progress-and-logs.md) runs as written:
its progress is reported and what it logs is captured."""

from __future__ import annotations

import re
import types

from recruiter.domain.workable import JobContext
from recruiter.processes.worker.capture import LogBuffer, capturing, ensure_installed
from tests.conftest import REPO


def section_code() -> str:
    text = (REPO / "docs" / "guide" / "progress-and-logs.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
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
