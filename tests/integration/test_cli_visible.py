"""Text from the database printed by the command line as text (issue 39), against a real server.

A job whose argument, group, error message and log line hold BEL, BS, VT, FF, ESC, C1 and
bidirectional controls: ``jobs show``, ``jobs list``, ``jobs explain``, ``status`` and
``groups list`` print them escaped, never raw. A 1 MB argument is cut with its size
unless ``jobs show --full``. No command prints but through :mod:`recruiter.cli.output`.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from click.testing import CliRunner, Result

from recruiter.cli.main import main
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.domain.visible import VALUE_BOUND
from tests.conftest import REPO
from tests.workables import Record

HOSTILE = "abc\u202eexe.live\x07\x08\x08\x0b\x0c\x1b[2J\x9b\u2066x\u2069\u200f\r"
SHOWN = r"abc\u202eexe.live\x07\x08\x08\x0b\x0c\x1b[2J\x9b\u2066x\u2069\u200f\r"
RAW = set("\u202e\u2066\u2069\u200f\x07\x08\x0b\x0c\x1b\x9b\r")


def cli(*args: str, db_uri: str) -> Result:
    return CliRunner().invoke(main, [*args, "--target", db_uri], catch_exceptions=False)


def hostile_job(db: Any, db_uri: str, **changes: Any) -> dict[str, Any]:
    now = datetime.now(UTC).replace(microsecond=0)
    doc = dict(build_job_document(Record(db_uri, n=1), JobOptions(group="mail"), now - timedelta(minutes=1)))
    doc["group"] = f"mail{HOSTILE}"  # the producer refuses such a name; a document written by hand does not
    doc["workable"]["parameters"]["note"] = HOSTILE
    run = {"attempt": 1, "outcome": "failed", "worker": "w-1", "pid": 7, "hostname": "h",
           "started_at": now - timedelta(seconds=3), "ended_at": now - timedelta(seconds=2),
           "class": "ValueError", "message": f"bad {HOSTILE}", "trace": f"Traceback\nValueError: {HOSTILE}\n",
           "logs": f"first line\n{HOSTILE}\n\ttabbed\n"}
    doc = {**{k: v for k, v in doc.items() if k != "status"}, "why": "tried-too-many-times", "archived_at": now,
           "done": False, "attempts": 1, "executions": [run], "last_execution": run, **changes}
    db.archived.insert_one(doc)
    return doc


def no_raw(result: Result) -> None:
    assert result.exit_code == 0, result.stderr
    assert not RAW & set(result.stdout + result.stderr), repr(result.stdout[:2000])


def test_jobs_show_prints_controls_escaped(db: Any, db_uri: str) -> None:
    doc = hostile_job(db, db_uri)
    out = cli("jobs", "show", str(doc["_id"]), db_uri=db_uri)
    no_raw(out)
    lines = out.stdout.splitlines()
    assert f"group      mail{SHOWN}" in lines
    assert f"    ValueError: bad {SHOWN}" in lines
    assert f"      {SHOWN}" in lines  # the log line, on its own line
    assert "      \ttabbed" in lines  # a multi-line text keeps its tabs
    assert f"      ValueError: {SHOWN}" in lines  # the trace
    assert json.dumps(HOSTILE)[1:-1] in out.stdout  # the parameters, as JSON
    shown = json.loads(cli("jobs", "show", "--json", str(doc["_id"]), db_uri=db_uri).stdout)
    assert shown["executions"][0]["logs"] == doc["last_execution"]["logs"]  # JSON: the value whole, escaped by JSON


def test_jobs_list_explain_status_and_groups_print_controls_escaped(db: Any, db_uri: str) -> None:
    doc = hostile_job(db, db_uri)
    listing = cli("jobs", "list", db_uri=db_uri)
    no_raw(listing)
    assert f"mail{SHOWN}" in listing.stdout
    no_raw(cli("jobs", "explain", str(doc["_id"]), db_uri=db_uri))
    db.metadata.insert_one({"_id": "paused", "groups": [f"mail{HOSTILE}"], "tenants": []})
    paused = cli("groups", "list", db_uri=db_uri)
    no_raw(paused)
    assert f"mail{SHOWN}" in paused.stdout
    no_raw(cli("status", db_uri=db_uri))
    a_line = dict(doc, _id=None, group=f"two\nlines{HOSTILE}")
    del a_line["_id"]
    db.archived.insert_one(a_line)
    table = cli("jobs", "list", db_uri=db_uri)
    no_raw(table)
    assert len(table.stdout.splitlines()) == 3  # a newline in a group does not make a row of its own
    assert rf"two\nlines{SHOWN}" in table.stdout


def test_a_1mb_argument_is_cut_with_its_size_unless_full(db: Any, db_uri: str) -> None:
    doc = hostile_job(db, db_uri)
    db.archived.update_one({"_id": doc["_id"]}, {"$set": {"workable.parameters.blob": "x" * (1024 * 1024),
                                                          "last_execution.logs": "l" * 1_000_000,
                                                          "executions.0.logs": "l" * 1_000_000}})
    out = cli("jobs", "show", str(doc["_id"]), db_uri=db_uri)
    no_raw(out)
    assert len(out.stdout) < 40 * 1024
    assert re.search(r"cut: 4096 of 10\d{5} characters shown \(1\.0 MiB in all\); jobs show --full", out.stdout)
    assert "cut: 4096 of 1000000 characters shown" in out.stdout  # the logs
    whole = cli("jobs", "show", "--full", str(doc["_id"]), db_uri=db_uri)
    no_raw(whole)
    assert "x" * (1024 * 1024) in whole.stdout
    assert "l" * 1_000_000 in whole.stdout
    assert VALUE_BOUND == 4096


def test_no_command_prints_but_through_the_output_module() -> None:
    printing = {path.name for path in (REPO / "recruiter" / "cli").glob("*.py")
                if re.search(r"click\.echo\(|\bprint\(|sys\.std(out|err)\.write", path.read_text())}
    assert printing <= {"output.py", "reference.py"}, printing
