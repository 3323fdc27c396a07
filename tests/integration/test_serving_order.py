"""A round serves the free entries holding an outcome before the longest available
(recruiter.domain.lanes.serving_order): the assignment that reaches such an entry also clears
its outcome, where one given elsewhere leaves the outcome a write of its own."""

from __future__ import annotations

from datetime import timedelta

from tests.integration.test_processes_inproc import Harness, run, take_and_work
from tests.workables import Record


def test_a_worker_holding_an_outcome_takes_the_next_job_before_one_free_for_longer(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        first_worker = await h.worker("a")  # registered first: free the longest
        h.clock.advance(timedelta(milliseconds=10))
        await h.worker("b")
        first = await Record(h.db_uri, n=1).as_job_of(h.producer).enqueue()
        assert (await h.round()).assigned == 1
        assert (await h.roster("a"))["assigned_to"] == {"a": first}  # longest free first
        h.clock.advance(timedelta(seconds=1))
        assert await take_and_work(*first_worker) == first
        entry = await h.roster("a")
        assert "outcome" in entry
        assert entry["available_since"] > (await h.roster("b"))["available_since"]

        second = await Record(h.db_uri, n=2).as_job_of(h.producer).enqueue()
        h.commands.clear()
        report = await h.round()
        assert (report.applied, report.assigned) == (1, 1)
        assert (await h.roster("a"))["assigned_to"] == {"a": second}
        assert "outcome" not in (await h.roster("a") or {})
        assert (await h.roster("b"))["available"] is True
        # One statement assigned the job and cleared the outcome: none of its own for the outcome.
        assert len(h.commands.updates("roster")) == 1, h.commands.updates("roster")
        assert await h.db.archived.count_documents({"_id": first, "why": "done"}) == 1

    run(db_uri, scenario)

