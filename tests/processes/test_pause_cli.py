"""``recruiter groups|tenants pause|resume|list`` and what ``recruiter status`` shows.

The commands that only read and write the database run in this process (``cli_in_process``);
the bad options of ``start`` run the real entry point, a process of its own."""

from __future__ import annotations

import json
from typing import Any

from recruiter import Recruiter
from tests.conftest import cli_in_process
from tests.processes.test_cli_errors import assert_one_line_error, run_cli
from tests.workables import Record


def test_pause_resume_and_list(db: Any, db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:  # names nobody uses need --force (tests/processes/test_newcomer_cli.py)
        rec.enqueue_many([Record(db_uri, n=1).as_job_of(rec).in_group("billing"),
                          Record(db_uri, n=2).as_job_of(rec).in_group("reports").for_tenant("acme-com")])
    out = cli_in_process("groups", "pause", "billing", "reports", "--target", db_uri)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "paused groups: billing, reports"
    paused = cli_in_process("tenants", "pause", "acme-com", "--target", db_uri)
    assert paused.stdout.strip() == "paused tenants: acme-com"
    assert cli_in_process("groups", "resume", "billing", "--target", db_uri).stdout.strip() == "paused groups: reports"
    assert cli_in_process("groups", "list", "--target", db_uri).stdout.strip() == "paused groups: reports"
    assert db.metadata.find_one({"_id": "paused"}) == {"_id": "paused", "groups": ["reports"],
                                                      "tenants": ["acme-com"]}
    status = cli_in_process("status", "--target", db_uri, "--json")
    assert json.loads(status.stdout)["paused"] == {"groups": ["reports"], "tenants": ["acme-com"]}
    assert "paused:    group reports, tenant acme-com" in cli_in_process("status", "--target", db_uri).stdout
    cli_in_process("tenants", "resume", "acme-com", "--target", db_uri)
    assert cli_in_process("tenants", "list", "--target", db_uri).stdout.strip() == "paused tenants: none"


def test_bad_names_and_schemes_are_one_line() -> None:
    never = "mongodb://127.0.0.1:1/never-contacted"
    assert_one_line_error(run_cli("groups", "pause", "*", "--target", never), "invalid group name")
    assert_one_line_error(run_cli("start", "--counting-scheme", "4", "--target", never), "invalid counting scheme")
    assert_one_line_error(run_cli("start", "--target", never, env={"RECRUITER_COUNTING_SCHEME": "0,0"}),
                          "counting scheme")


def test_resuming_what_is_not_paused_writes_nothing(db: Any, db_uri: str) -> None:
    """Issue 22, item 4: ``groups resume`` of a group never paused wrote a document; now it
    writes nothing and says so in one line."""
    for kind in ("groups", "tenants"):
        out = cli_in_process(kind, "resume", "never-paused", "--target", db_uri)
        assert out.returncode == 0, out.stderr
        assert out.stderr.strip() == "not paused, nothing to resume: never-paused"
        assert out.stdout.strip() == f"paused {kind}: none"
    assert db.metadata.count_documents({}) == 0


def test_durations_beyond_a_century_are_one_line_and_change_nothing(db: Any, db_uri: str) -> None:
    """Issue 22, item 4: these printed an OverflowError traceback."""
    with Recruiter.connect(db_uri) as rec:
        rec.enqueue(Record(db_uri, n=1).as_job_of(rec))
    before = list(db.scheduled.find())
    assert_one_line_error(cli_in_process("jobs", "list", "--since", "1000000d", "--target", db_uri), "too large")
    assert_one_line_error(cli_in_process("jobs", "retry", "--why", "done", "--since", "1000000d", "--target", db_uri),
                          "too large")
    assert list(db.scheduled.find()) == before
    assert db.archived.count_documents({}) == 0


def test_pause_and_resume_work_over_switches_that_are_not_lists(db: Any, db_uri: str) -> None:
    """The switches document is untrusted: a list edited into something else by hand made ``pause``
    ($addToSet) and ``resume`` ($pull) fail for good. Now the switch is written over it."""
    with Recruiter.connect(db_uri) as rec:
        rec.enqueue_many([Record(db_uri, n=1).as_job_of(rec).in_group("billing"),
                          Record(db_uri, n=2).as_job_of(rec).in_group("reports").for_tenant("acme-com")])
    db.metadata.insert_one({"_id": "paused", "groups": "billing", "tenants": {"acme-com": 1}})
    out = cli_in_process("groups", "pause", "reports", "--target", db_uri)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "paused groups: reports"
    paused = cli_in_process("tenants", "pause", "acme-com", "--target", db_uri)
    assert paused.stdout.strip() == "paused tenants: acme-com"
    db.metadata.update_one({"_id": "paused"}, {"$set": {"groups": "reports"}})
    out = cli_in_process("groups", "pause", "billing", "--target", db_uri)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "paused groups: billing"
    db.metadata.update_one({"_id": "paused"}, {"$set": {"tenants": "acme-com"}})  # $in matches it: resume writes
    out = cli_in_process("tenants", "resume", "acme-com", "--target", db_uri)
    assert out.returncode == 0, out.stderr
    assert db.metadata.find_one({"_id": "paused"}) == {"_id": "paused", "groups": ["billing"], "tenants": []}
