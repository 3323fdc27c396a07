"""What the driver logs from its background tasks prints on one line below ``--log-level debug``
(recruiter.processes.logs.DriverErrorsOnOneLine); other loggers' tracebacks, a job's own
included, print as before. Run in a child process: logging's configuration is process-wide."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO

SCRIPT = """
import logging, sys
from recruiter.processes import logs
logs.configure(sys.argv[1], sys.argv[2])
def fail(name, message):
    try:
        raise RuntimeError(message)
    except RuntimeError:
        logging.getLogger(name).exception("%s task failed:", "background")
fail("pymongo.client", "no server\\nat 127.0.0.1:1")
fail("pymongo", "the root driver logger")
fail("jobs.report", "a job's own error")
logging.getLogger("pymongo.client").warning("a plain warning")
"""


def run(level: str, fmt: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", SCRIPT, level, fmt], cwd=REPO, capture_output=True, text=True,
                         timeout=60, check=True)
    return out.stderr.splitlines()


def test_a_driver_error_prints_on_one_line_with_its_exception() -> None:
    lines = run("info", "console")
    assert "ERROR:pymongo.client:background task failed: RuntimeError: no server at 127.0.0.1:1" in lines, lines
    assert "ERROR:pymongo:background task failed: RuntimeError: the root driver logger" in lines, lines
    assert "WARNING:pymongo.client:a plain warning" in lines, lines
    # A job's logger keeps its traceback: it is the user's, not an internal one.
    job = lines.index("ERROR:jobs.report:background task failed:")
    assert lines[job + 1] == "Traceback (most recent call last):", lines
    assert "RuntimeError: a job's own error" in lines[job + 1:], lines
    assert sum(line.startswith("Traceback") for line in lines) == 1, lines


def test_in_json_every_record_is_one_json_document_and_the_driver_error_is_brief() -> None:
    docs = [json.loads(line) for line in run("info", "json")]  # every line parses
    by_logger = {(d["logger"], d["level"]): d for d in docs}
    driver = by_logger[("pymongo.client", "error")]
    assert driver["event"] == "background task failed: RuntimeError: no server at 127.0.0.1:1"
    assert "exception" not in driver
    assert by_logger[("pymongo", "error")]["event"].endswith("RuntimeError: the root driver logger")
    assert by_logger[("pymongo.client", "warning")]["event"] == "a plain warning"
    # A job's logger keeps its traceback, inside its document.
    job = by_logger[("jobs.report", "error")]
    assert job["event"] == "background task failed:"
    assert "Traceback (most recent call last):" in job["exception"]
    assert "RuntimeError: a job's own error" in job["exception"]


def test_at_debug_the_driver_error_keeps_its_traceback() -> None:
    lines = run("debug", "console")
    assert lines.count("ERROR:pymongo.client:background task failed:") == 1, lines
    assert sum(line.startswith("Traceback") for line in lines) == 3, lines
