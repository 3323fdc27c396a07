"""``recruiter jobs retry --why tried-too-many-times --since 10m`` with real recruiter, worker and cleaner processes.

Jobs end ``tried-too-many-times`` (recently, and some whose ``archived_at`` the
test moves 20 minutes back), ``done``, and ``not-scheduled-by-retry-policy``; the
cause of the failures is then fixed and the recent ones retried: exactly those
are put back, each linked to its original, the originals stay as they were, and
the copies run and end ``done``. The commands that list, retry and show run in this
process (``cli_in_process``); the bad input goes through the real entry point.
"""

from __future__ import annotations

import json
import signal
from datetime import UTC, datetime, timedelta
from typing import Any

from bson import ObjectId

from recruiter import Recruiter
from tests.conftest import cli_in_process, wait_for
from tests.processes.conftest import Processes
from tests.processes.test_cli_errors import assert_one_line_error, run_cli
from tests.retry_workables import FailsUntilAllowed, allow
from tests.workables import AlwaysFails, Record

RECENT, OLD = 4, 3


def test_retry_by_why_since_puts_back_exactly_the_recent_failures_and_they_run(
        processes: Processes, db: Any, db_uri: str) -> None:
    recruiter = processes.recruiter()
    worker = processes.worker("--group", "generic")
    cleaner = processes.cleaner()
    with Recruiter.connect(db_uri) as rec:
        old = [rec.enqueue(FailsUntilAllowed(db_uri, "fixed", n=100 + i)) for i in range(OLD)]
        wait_for(lambda: db.archived.count_documents({"_id": {"$in": old}}) == OLD, timeout_s=60,
                 message="the first failures to be archived")
        past = datetime.now(UTC) - timedelta(minutes=20)
        db.archived.update_many({"_id": {"$in": old}}, {"$set": {"archived_at": past}})
        recent = [rec.enqueue(FailsUntilAllowed(db_uri, "fixed", n=i)) for i in range(RECENT)]
        done = [rec.enqueue(Record(db_uri, n=i)) for i in range(3)]
        other = [rec.enqueue(AlwaysFails(db_uri)) for _ in range(2)]
    everything = [*old, *recent, *done, *other]
    wait_for(lambda: db.archived.count_documents({"_id": {"$in": everything}}) == len(everything), timeout_s=60,
             message="every job to be archived")
    whys = {d["_id"]: d["why"] for d in db.archived.find({}, {"why": 1})}
    assert {whys[i] for i in [*old, *recent]} == {"tried-too-many-times"}
    assert {whys[i] for i in done} == {"done"}
    assert {whys[i] for i in other} == {"not-scheduled-by-retry-policy"}
    listed = cli_in_process("jobs", "list", "--why", "tried-too-many-times", "--since", "10m", "--json",
                            "--target", db_uri)
    assert listed.returncode == 0, listed.stderr
    assert sorted(r["id"] for r in json.loads(listed.stdout)) == sorted(str(i) for i in recent)

    originals = {d["_id"]: d for d in db.archived.find({"_id": {"$in": everything}})}
    allow(db_uri, "fixed")
    out = cli_in_process("jobs", "retry", "--why", "tried-too-many-times", "--since", "10m", "--json",
                         "--target", db_uri)
    assert out.returncode == 0, out.stderr
    retried = json.loads(out.stdout)["retried"]
    assert sorted(r["retry_of"] for r in retried) == sorted(str(i) for i in recent)
    copies = [ObjectId(r["id"]) for r in retried]
    assert not set(copies) & set(everything)

    wait_for(lambda: db.archived.count_documents({"_id": {"$in": copies}, "why": "done"}) == RECENT, timeout_s=60,
             message="the retried jobs to run and end done")
    for copy in db.archived.find({"_id": {"$in": copies}}):
        assert copy["retry_of"] in recent
        assert copy["result"] == originals[copy["retry_of"]]["workable"]["parameters"]["n"]
        assert copy["attempts"] == 1
    # The originals are as they were but for the name of their copy.
    after = {d["_id"]: d for d in db.archived.find({"_id": {"$in": everything}})}
    assert {i: d.pop("retried_as") for i, d in after.items() if "retried_as" in d} == {
        ObjectId(r["retry_of"]): ObjectId(r["id"]) for r in retried}
    assert {i: {k: v for k, v in d.items() if k != "retried_at"} for i, d in after.items()} == originals
    assert db.scheduled.count_documents({}) == 0

    shown = cli_in_process("jobs", "show", str(copies[0]), "--target", db_uri)
    assert shown.returncode == 0, shown.stderr
    assert "state      archived: done" in shown.stdout
    original = db.archived.find_one({'_id': copies[0]})['retry_of']
    assert f"retry of   {original}" in shown.stdout
    assert f"retried as {copies[0]}" in cli_in_process("jobs", "show", str(original), "--target", db_uri).stdout
    assert "attempt 1: done" in shown.stdout

    # Bad input through the real command: one line, nothing changed.
    with Recruiter.connect(db_uri) as rec:
        waiting = rec.enqueue(Record(db_uri).as_job_of(rec).in_group("nobody-serves-this"))
    before = (list(db.scheduled.find()), list(db.archived.find()))
    assert_one_line_error(run_cli("jobs", "retry", str(waiting), "--target", db_uri),
                          f"{waiting} is not archived (it is queued)")
    assert_one_line_error(run_cli("jobs", "list", "--state", "done", "--target", db_uri), "unknown state 'done'")
    assert_one_line_error(run_cli("jobs", "show", "not-an-id", "--target", db_uri), "not a job id")
    assert_one_line_error(run_cli("jobs", "show", str(ObjectId()), "--target", db_uri), "no job")
    assert (list(db.scheduled.find()), list(db.archived.find())) == before

    for p in (recruiter, worker, cleaner):
        p.signal(signal.SIGTERM)
    for p in (recruiter, worker, cleaner):
        assert p.wait(30) == 0
