"""Function jobs against the server: enqueued by a Recruiter or an AsyncRecruiter, run by a real
recruiter and worker (recruiter.testing.drain), waited on through their handles, and archived
under the function's name; a call that does not fit is refused and writes nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from recruiter import AsyncRecruiter, JobRefused, Recruiter
from recruiter.testing import drain, drain_async
from tests.function_jobs import flaky, ping, send_invoice


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
