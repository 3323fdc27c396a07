"""Function jobs against the server: enqueued by a Recruiter or an AsyncRecruiter, run by a real
recruiter and worker (recruiter.testing.drain), waited on through their handles, and archived
under the function's name; a call that does not fit is refused and writes nothing."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from recruiter import AsyncRecruiter, JobRefused, Recruiter
from recruiter.testing import drain, drain_async
from tests.conftest import REPO
from tests.function_jobs import flaky, ping, send_invoice
from tests.processes.test_readme import readme_files


def test_function_jobs_run_and_their_handles_wait_for_the_functions_results(db_uri: str, db: Any) -> None:
    with Recruiter.connect(db_uri) as rec:
        invoice = send_invoice.enqueue(rec, "INV-1", 3, copy_to="ops@example.com")  # sync, in a child (timeout)
        pong = ping.job(rec, 2).in_group("pings").enqueue()  # async, with the context
        retried = flaky.enqueue(rec, 1)
        with pytest.raises(JobRefused, match="missing a required argument: 'invoice_id'"):
            send_invoice.enqueue(rec)  # type: ignore[call-arg]
        assert db.scheduled.count_documents({}) == 3, "the refused call wrote nothing"
        drain(db_uri)
        assert invoice.wait(timeout=30) == {"invoice": "INV-1", "amount": 3, "copy_to": "ops@example.com",
                                            "extra": {}}
        assert pong.wait(timeout=30) == "pong 2 in pings, attempt 1"
        assert retried.wait(timeout=30) == 2
    archived = db.archived.find_one({"_id": retried})
    assert archived["workable"] == {"class": "tests.function_jobs:flaky", "parameters": {"fail_times": 1},
                                    "method": "execute"}
    assert [e["outcome"] for e in archived["executions"]] == ["failed", "done"]
    assert "attempt 1 fails" in archived["executions"][0]["message"]
    assert db.archived.find_one({"_id": invoice})["workable"]["class"] == "tests.function_jobs:send_invoice"


def test_an_async_recruiter_enqueues_a_function_job_and_awaits_its_result(db_uri: str) -> None:
    async def main() -> None:
        rec = await AsyncRecruiter.connect(db_uri)
        async with rec:
            handle = await ping.enqueue(rec, 5)
            await drain_async(db_uri)
            assert await handle.wait(timeout=30) == "pong 5 in generic, attempt 1"

    asyncio.run(main())


def test_the_guides_remind_example_runs_as_written(db_uri: str, db: Any, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/guide/writing-jobs.md's remind.py, run as the user would, then its jobs drained."""
    files = readme_files()
    for name in ("reminders.py", "remind.py"):
        (tmp_path / name).write_text(files[name])
    env = {**os.environ, "PYTHONPATH": str(REPO), "RECRUITER_MONGODB_URI": db_uri}
    ran = subprocess.run([sys.executable, "remind.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert "{'reminded': 'INV-0', 'days': 0}" in ran.stdout
    jobs = {d["workable"]["parameters"].get("invoice_id") or d["workable"]["parameters"]["currency"]: d
            for d in db.scheduled.find()}
    assert sorted(jobs) == ["EUR", "INV-1", "INV-2", "INV-3", "INV-4", "INV-5"]
    assert {d["group"] for d in jobs.values()} == {"billing"}
    assert jobs["EUR"]["workable"]["class"] == "reminders:fetch_rate"
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "reminders", raising=False)
    drain(db_uri)
    assert db.scheduled.count_documents({}) == 1, "the one delayed by five minutes waits"
    assert db.archived.find_one({"_id": jobs["INV-1"]["_id"]})["result"] == {"reminded": "INV-1", "days": 3}
    assert db.archived.find_one({"_id": jobs["EUR"]["_id"]})["result"] == 1.0
