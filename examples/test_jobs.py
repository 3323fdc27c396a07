"""Tests of the example jobs, written as a user of recruiter would write them (recruiter.testing).

``run_inline`` runs a job here, without a server, retried as its policy says (the
waits are skipped); ``drain`` runs a real recruiter and worker against a test
database until the queue is empty and returns the archived jobs.
"""

from __future__ import annotations

import asyncio

from examples.invoices import GATEWAY_BACKOFF, ONLY_GATEWAY_TIMEOUTS, SendInvoice, VoidInvoice
from examples.reports import RETRY_TWICE, BuildMonthlyReport
from recruiter import Recruiter
from recruiter.testing import Inline, drain, run_inline, run_inline_async


def test_an_invoice_that_times_out_once_goes_through_on_its_retry() -> None:
    result = SendInvoice(8, "acme", 1200).as_job_of(Inline()).retry_with(GATEWAY_BACKOFF).enqueue()
    assert result.why == "done"
    assert result.result == {"invoice": 8, "charged_cents": 1200, "attempt": 2}
    assert [a.outcome for a in result.attempts] == ["failed", "done"]
    assert result.attempts[0].error_class == "examples.invoices:GatewayTimeout"


def test_an_invoice_whose_gateway_always_times_out_is_tried_four_times() -> None:
    result = SendInvoice(7, "acme", 500).as_job_of(Inline()).retry_with(GATEWAY_BACKOFF).enqueue()
    assert result.why == "tried-too-many-times"
    assert len(result.attempts) == 4
    # 200 ms, 400 ms, 800 ms: the backoff's waits, skipped here.
    assert [w.total_seconds() for w in result.waits] == [0.2, 0.4, 0.8]


def test_voiding_a_paid_invoice_is_not_retried() -> None:
    result = run_inline(VoidInvoice(3, "duplicate").as_job_of(Inline()).retry_with(ONLY_GATEWAY_TIMEOUTS))
    assert result.why == "non-retriable-exception"
    assert len(result.attempts) == 1
    assert "invoice 3 is paid" in (result.last.message or "")


def test_a_march_report_is_turned_away_once_then_built() -> None:
    async def main() -> None:
        report = BuildMonthlyReport("acme", "2026-03").as_job_of(Inline()).retry_with(RETRY_TWICE)
        result = await run_inline_async(report)
        assert result.why == "done"
        assert [a.error_class for a in result.attempts] == ["examples.reports:WarehouseBusy", None]

    asyncio.run(main())


def test_the_examples_drained_through_a_real_recruiter_and_worker(db_uri: str) -> None:
    with Recruiter.connect(db_uri) as rec:
        jobs = [SendInvoice(1, "acme", 100).as_job_of(rec).in_group("billing"),
                VoidInvoice(2, "typo").as_job_of(rec).in_group("billing").retry_with(ONLY_GATEWAY_TIMEOUTS),
                BuildMonthlyReport("acme", "2026-01").as_job_of(rec).in_group("reports")]
    drained = drain(db_uri, jobs, concurrency=2)
    assert drained.whys == ["done", "non-retriable-exception", "done"]
    assert drained.results[0] == {"invoice": 1, "charged_cents": 100, "attempt": 1}
    assert drained.enqueued[1]["last_execution"]["class"] == "examples.invoices:InvoiceAlreadyPaid"
