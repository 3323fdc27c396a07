"""Snooze with real processes (a recruiter and two workers): a job that returns ``Snooze(1)`` twice
then succeeds ran three times, counts one attempt, and its history shows the two snoozes; while it
sleeps, ``jobs explain`` says it snoozed, how many times and until when; ``jobs show`` lists each
snooze. A job that snoozes for ever ends ``snoozed-too-often`` at its cap. Sync, async and a child
process (a timeout) alike."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import pytest

from recruiter import Recruiter
from tests.conftest import cli_in_process, wait_for
from tests.processes.conftest import Processes
from tests.snoozing import AsyncSnoozesThenDone, SnoozesForEver, SnoozesThenDone, TimedSnoozesThenDone, runs_of


def _cli(db_uri: str, *args: str) -> str:
    out = cli_in_process(*args, "--target", db_uri)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    return out.stdout


@pytest.mark.parametrize("cls", [SnoozesThenDone, AsyncSnoozesThenDone, TimedSnoozesThenDone])
def test_a_job_snoozes_twice_then_succeeds_with_one_attempt(processes: Processes, db: Any, db_uri: str,
                                                            cls: type) -> None:
    processes.recruiter()
    processes.worker("--id", "w1")
    processes.worker("--id", "w2")
    with Recruiter.connect(db_uri) as rec:
        job_id = cls(db_uri, times=2, seconds=3).as_job_of(rec).enqueue()
        forever = SnoozesForEver(db_uri).as_job_of(rec).enqueue()

    def asleep() -> str | None:
        out = _cli(db_uri, "jobs", "explain", str(job_id)).strip()
        return out if out.startswith("snoozed: snoozed ") else None

    # Asleep after a snooze: explain says so, how many times and until when.
    text = wait_for(asleep, timeout_s=60, interval_s=0.2, message="jobs explain to say snoozed")
    assert re.match(r"snoozed: snoozed (1 time|2 times) \(of at most 100\): due at \d{4}-\d\d-\d\d ", text), text

    archived = wait_for(lambda: db.archived.find_one({"_id": job_id}), timeout_s=90, message="the job done")
    assert (archived["why"], archived["attempts"], archived["snoozes"], archived["result"]) == ("done", 1, 2, 3)
    assert runs_of(db_uri, str(job_id)) == 3
    history = archived["executions"]
    assert [(e["outcome"], e["attempt"], e.get("snooze")) for e in history] == [
        ("snoozed", 1, 1), ("snoozed", 1, 2), ("done", 1, None)]
    # Each snooze lasted what it asked: the next run started no earlier than its end.
    for snoozed, after in itertools.pairwise(history):
        assert after["started_at"] >= snoozed["snoozed_until"]
    shown = _cli(db_uri, "jobs", "show", str(job_id))
    assert "attempt 1: snoozed" in shown
    assert "    snooze 2 until " in shown
    assert "snoozes    2 (of at most 100)" in shown
    as_json = json.loads(_cli(db_uri, "jobs", "show", str(job_id), "--json"))
    assert (as_json["snoozes"], as_json["max_snoozes"]) == (2, 100)
    assert [e.get("snooze") for e in as_json["executions"]] == [1, 2, None]

    capped = wait_for(lambda: db.archived.find_one({"_id": forever}), timeout_s=90)
    assert capped["why"] == "snoozed-too-often"
    assert capped["reason"] == "it asked to snooze a 4th time; a job may snooze 3 times (max_snoozes)"
    assert runs_of(db_uri, str(forever)) == 4
    assert "snoozed-too-often" in _cli(db_uri, "jobs", "explain", str(forever))
