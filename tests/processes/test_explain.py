"""``recruiter jobs explain ID`` names why each job waits, with real recruiter and worker processes.

Jobs are put into every waiting state: due later, retrying (a failure, then an hour's backoff),
its group paused, its tenant paused, a group no worker takes, aimed at a worker that is gone,
held by a limit (its group's max_running reached while a slot of the group idles), queued
behind one another in one tenant while the only worker runs a slow job, and assigned to a
worker that was SIGSTOPped or SIGKILLed so that its heartbeat is late. The command names each;
``jobs show`` carries the same line; resuming the paused group and tenant lets their jobs run
(the explanation was the reason). The commands run in this test's process (``cli_in_process``:
a Python start-up per poll was much of the test's time), but for the bad input, which the
real entry point refuses in one line.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from bson import ObjectId

from recruiter import Recruiter
from recruiter.retry import RetryManyTimes
from tests.conftest import cli_in_process, wait_for
from tests.processes.conftest import Processes
from tests.processes.test_cli_errors import assert_one_line_error, run_cli
from tests.workables import AlwaysFails, Record, WaitForRelease, release


def explain(db_uri: str, job_id: object) -> tuple[str, str]:
    """``(code, text)`` as ``recruiter jobs explain`` prints them (``code: text``)."""
    out = cli_in_process("jobs", "explain", str(job_id), "--target", db_uri)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 1, out.stdout
    code, _, text = lines[0].partition(": ")
    return code, text


def explained_as(db_uri: str, job_id: object, code: str) -> str | None:
    """The text, once ``jobs explain`` names ``code`` (for ``wait_for``)."""
    found, text = explain(db_uri, job_id)
    return text if found == code else None


def due_of(db: Any, job_id: object) -> str:
    """The job's ``scheduled_at`` as ``jobs explain`` prints it."""
    return str(db.scheduled.find_one({"_id": job_id})["scheduled_at"].strftime("%Y-%m-%d %H:%M:%S"))


def started(db: Any, job_id: object) -> bool:
    return db.ledger.find_one({"job": str(job_id), "event": "start"}) is not None


@pytest.fixture
def stopped_pids() -> Iterator[list[int]]:
    """Processes the test SIGSTOPs: continued at the end, whatever happens, so they can be stopped."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def test_jobs_explain_names_every_waiting_state(processes: Processes, db: Any, db_uri: str,
                                                stopped_pids: list[int]) -> None:
    processes.recruiter()
    # No look-ahead (--prefetch 0): the busy worker holds no job ahead, the queued ones wait in the queue.
    processes.worker("--group", "queue", "--id", "busy", "--prefetch", "0")
    processes.worker("--group", "pg", "--group", "tg", "--id", "idle", "--prefetch", "0")
    frozen = processes.worker("--group", "st", "--id", "frozen", "--prefetch", "0")
    killed = processes.worker("--group", "kl", "--id", "killed", "--prefetch", "0")
    processes.worker("--group", "lim", "--id", "capped", "--concurrency", "2", "--prefetch", "0")
    for kind, name in (("groups", "pg"), ("tenants", "sleepy")):
        out = cli_in_process(kind, "pause", "--force", name, "--target", db_uri)
        assert out.returncode == 0, out.stderr
    out = cli_in_process("limits", "set", "--group", "lim", "--max-running", "1", "--target", db_uri)
    assert out.returncode == 0, out.stderr
    with Recruiter.connect(db_uri) as rec:
        slow = WaitForRelease(db_uri, "slow").as_job_of(rec).in_group("queue").for_tenant("acme").enqueue().id
        on_frozen = WaitForRelease(db_uri, "frozen").as_job_of(rec).in_group("st").enqueue().id
        on_killed = WaitForRelease(db_uri, "killed").as_job_of(rec).in_group("kl").enqueue().id
        at_cap = WaitForRelease(db_uri, "capped").as_job_of(rec).in_group("lim").enqueue().id
        wait_for(lambda: all(started(db, j) for j in (slow, on_frozen, on_killed, at_cap)), timeout_s=60,
                 message="the four slow jobs to start")
        held = Record(db_uri, n=15).as_job_of(rec).in_group("lim").enqueue().id
        queued = [Record(db_uri, n=i).as_job_of(rec).in_group("queue").for_tenant("acme").enqueue().id
                  for i in range(3)]
        later = Record(db_uri, n=10).as_job_of(rec).in_group("queue").schedule_in(hours=1).enqueue().id
        in_paused_group = Record(db_uri, n=11).as_job_of(rec).in_group("pg").enqueue().id
        of_paused_tenant = Record(db_uri, n=12).as_job_of(rec).in_group("tg").for_tenant("sleepy").enqueue().id
        nobody = Record(db_uri, n=13).as_job_of(rec).in_group("nobody").enqueue().id
        ghost = Record(db_uri, n=14).as_job_of(rec).in_group("tg").on_worker("ghost").enqueue().id
        failing = AlwaysFails(db_uri).as_job_of(rec).in_group("tg").retry_with(RetryManyTimes(3, "1h")).enqueue().id

    # Each explanation, named by its code, with the facts in its line.
    text = wait_for(lambda: explained_as(db_uri, slow, "running"), timeout_s=30, message="the slow job running")
    assert "running on worker busy" in text
    code, text = explain(db_uri, queued[0])
    assert code == "next", text
    assert "next in line in group queue, tenant acme" in text
    assert explain(db_uri, queued[1]) == ("behind", "behind 1 ready job(s) of its tenant in group queue, tenant acme "
                                                    "(1 live worker slot(s) take its group, 0 idle)")
    code, text = explain(db_uri, queued[2])
    assert code == "behind", text
    assert text.startswith("behind 2 ready job(s) of its tenant in group queue, tenant acme")
    code, text = explain(db_uri, later)
    assert code == "due-later", text
    assert text == f"due later: at {due_of(db, later)} UTC ({text.rpartition('(')[2]}", text
    # Due an hour after it was enqueued: read at once, by a clock calibrated apart, it may still show 1h.
    assert re.search(r"\(in (1h|(5\d|4\d)m(\d+s)?)\)$", text), text
    assert explain(db_uri, in_paused_group) == ("group-paused", "its group pg is paused (recruiter groups resume pg)")
    assert explain(db_uri, of_paused_tenant) == ("tenant-paused",
                                                 "its tenant sleepy is paused (recruiter tenants resume sleepy)")
    assert explain(db_uri, nobody) == ("no-worker", "no live worker takes its group nobody (none registered)")
    # A free slot of its group (capped-1), but the group's max_running is reached.
    assert explain(db_uri, held) == ("held-by-limit", "held by a limit: group lim runs 1 of max_running 1")
    code, text = explain(db_uri, ghost)
    assert code == "worker-gone", text
    assert "its aimed worker ghost is gone: not in the roster" in text
    text = wait_for(lambda: explained_as(db_uri, failing, "retrying"), timeout_s=30,
                    message="the failing job to wait for its retry")
    assert text.startswith(f"retrying: attempt 1 failed (builtins:ValueError: boom); backoff until "
                           f"{due_of(db, failing)} UTC (in "), text
    assert re.search(r"\(in (1h|(5\d|4\d)m(\d+s)?)\)$", text), text  # the policy's hour, from the failure

    # Workers frozen and killed while running: their heartbeats go late, their jobs stay theirs.
    frozen.signal(signal.SIGSTOP)
    stopped_pids.append(frozen.pid)
    killed.signal(signal.SIGKILL)
    killed.wait(10)
    for job_id, worker in ((on_frozen, "frozen"), (on_killed, "killed")):
        text = wait_for(lambda j=job_id: explained_as(db_uri, j, "heartbeat-late"), timeout_s=30,  # type: ignore[misc]
                        interval_s=0.3, message=f"the heartbeat of {worker} to be late")
        assert text.startswith(f"assigned to worker {worker}, whose heartbeat is late (last seen "), text
        assert text.endswith("; it was running the job)"), text

    # jobs show says the same in its waiting line; --json gives the code and the details.
    shown = cli_in_process("jobs", "show", str(queued[2]), "--target", db_uri)
    assert shown.returncode == 0, shown.stderr
    assert "waiting    behind: behind 2 ready job(s) of its tenant in group queue, tenant acme" in shown.stdout
    shown_json = json.loads(cli_in_process("jobs", "show", str(nobody), "--json", "--target", db_uri).stdout)
    assert shown_json["waiting"] == {"code": "no-worker",
                                     "text": "no live worker takes its group nobody (none registered)"}
    as_json = json.loads(cli_in_process("jobs", "explain", str(queued[2]), "--json", "--target", db_uri).stdout)
    assert as_json["code"] == "behind"
    assert as_json["details"]["ahead"] == 2
    assert as_json["id"] == str(queued[2])

    # The explanations were the reasons: resumed, released, the jobs run; then each is archived.
    for kind, name in (("groups", "pg"), ("tenants", "sleepy")):
        assert cli_in_process(kind, "resume", name, "--target", db_uri).returncode == 0
    release(db_uri, "slow")
    release(db_uri, "capped")
    ran = [*queued, in_paused_group, of_paused_tenant, slow, at_cap, held]
    wait_for(lambda: db.archived.count_documents({"_id": {"$in": ran}, "why": "done"}) == len(ran), timeout_s=60,
             message="the resumed and queued jobs to run")
    code, text = explain(db_uri, queued[0])
    assert code == "archived", text
    assert text.startswith("done at "), text  # the line is "archived: done at ...", said once
    assert "waiting " not in cli_in_process("jobs", "show", str(queued[0]), "--target", db_uri).stdout

    # Bad input: one line, non-zero (the real entry point, a process of its own).
    assert_one_line_error(run_cli("jobs", "explain", str(ObjectId()), "--target", db_uri), "no job")
    assert_one_line_error(run_cli("jobs", "explain", "not-an-id", "--target", db_uri))
    os.kill(frozen.pid, signal.SIGCONT)
    release(db_uri, "frozen")
