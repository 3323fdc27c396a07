"""Unique keys and resubmit with the real processes (``recruiter start``, ``worker start``,
``cleaner start``): ten producer processes racing on one key make one job, which runs once;
a running job resubmitted twice runs exactly once more, after its attempt."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from recruiter import Recruiter
from recruiter.domain.resubmit import AFTER_ATTEMPT, RESCHEDULED
from tests.conftest import REPO, wait_for
from tests.processes.conftest import Processes
from tests.processes.test_cli_errors import run_cli
from tests.processes.unique_storm import FOREVER_KEY, UNFINISHED_KEY
from tests.workables import WaitForRelease, release

PRODUCERS = 10
TIMES = 50


def test_ten_producers_racing_on_one_key_make_one_job_that_runs_once(processes: Processes, db: Any,
                                                                      db_uri: str) -> None:
    processes.recruiter()
    processes.cleaner()
    processes.worker("--id", "w1", "--concurrency", "2")
    processes.worker("--id", "w2", "--concurrency", "2")
    storm = [subprocess.Popen([sys.executable, "-m", "tests.processes.unique_storm", db_uri, f"p{i}", str(TIMES)],
                              cwd=REPO, stdout=subprocess.PIPE, text=True) for i in range(PRODUCERS)]
    try:
        wait_for(lambda: db.ledger.count_documents({"event": "storm-ready"}) == PRODUCERS, timeout_s=60,
                 message="every producer connected")
        db.ledger.insert_one({"event": "storm-go"})
        outputs = [p.communicate(timeout=120)[0] for p in storm]
    finally:
        for p in storm:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in storm)
    seen = [tuple(item) for out in outputs for item in json.loads(out)]
    assert len(seen) == 2 * PRODUCERS * TIMES
    for key in (UNFINISHED_KEY, FOREVER_KEY):
        ids = {job_id for k, job_id, _ in seen if k == key}
        assert len(ids) == 1, f"{key}: {len(ids)} jobs"
        assert Counter(existed for k, _, existed in seen if k == key) == {False: 1, True: PRODUCERS * TIMES - 1}
        jobs = db.scheduled.count_documents({"unique.key": key}) + db.archived.count_documents({"unique.key": key})
        assert jobs == 1

    # The key's job runs once, and only once (the one waiting for its release still runs).
    wait_for(lambda: db.ledger.count_documents({"event": "start", "key": "storm"}) == 1, timeout_s=60,
             message="the unfinished-scope job started")
    release(db_uri, "storm")
    wait_for(lambda: db.archived.count_documents({}) == 2, timeout_s=60, message="both jobs archived")
    assert {d["why"] for d in db.archived.find()} == {"done"}
    starts = Counter(str(e["job"]) for e in db.ledger.find({"event": "start"}))
    assert sorted(starts.values()) == [1, 1]
    assert db.scheduled.count_documents({}) == 0

    # ``jobs show`` tells the key.
    job_id = db.archived.find_one({"unique.key": FOREVER_KEY})["_id"]
    shown = run_cli("jobs", "show", str(job_id), "--target", db_uri)
    assert shown.returncode == 0, shown.stderr
    assert f"unique     {FOREVER_KEY} (forever)" in shown.stdout


def test_a_running_job_resubmitted_twice_runs_once_more_afterwards(processes: Processes, db: Any,
                                                                   db_uri: str) -> None:
    processes.recruiter()
    processes.worker("--id", "w1")
    with Recruiter.connect(db_uri) as rec:
        queued = WaitForRelease(db_uri, "queued").as_job_of(rec).schedule_in(hours=1).enqueue()
        running = WaitForRelease(db_uri, "first-run").as_job_of(rec).enqueue()
        wait_for(lambda: db.ledger.count_documents({"event": "start", "key": "first-run"}) == 1,
                 timeout_s=60, message="the job to start")
        wait_for(lambda: running.refresh().state == "running", timeout_s=30, message="the heartbeat to show it")
        assert [rec.resubmit(running).state for _ in range(2)] == [AFTER_ATTEMPT, AFTER_ATTEMPT]
        shown = run_cli("jobs", "show", str(running), "--target", db_uri)
        assert "runs once more after this attempt" in shown.stdout
        release(db_uri, "first-run")
        # The second run starts once the first has ended (the release lets it end at once too).
        assert running.wait(timeout=60) == "first-run"
        runs = sorted(db.ledger.find({"key": "first-run", "event": {"$in": ["start", "end"]}}), key=lambda e: e["at"])
        assert [e["event"] for e in runs] == ["start", "end", "start", "end"]
        assert [e["attempt"] for e in runs] == [1, 1, 2, 2]
        assert (running.attempts, running.view.document.get("resubmits")) == (2, 1)

        # A queued job is rescheduled: due now, it runs.
        result = rec.resubmit(queued)
        assert result.state == RESCHEDULED
        assert result.at is not None
        assert abs(result.at - datetime.now(UTC)) < timedelta(seconds=30)
        release(db_uri, "queued")
        assert queued.wait(timeout=60) == "queued"
