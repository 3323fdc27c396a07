"""Wrong calls of function jobs: mypy --strict reports an error on each line marked so
(tests/unit/test_function_jobs.py), and on no other line."""

from __future__ import annotations

from good import ping, send_invoice

from recruiter import AsyncJobHandle, AsyncRecruiter, JobContext, Recruiter


def produce(rec: Recruiter, arec: AsyncRecruiter) -> None:
    send_invoice.enqueue(rec, 1)  # error: an int where a str is taken
    send_invoice.enqueue(rec)  # error: the invoice id is missing
    send_invoice.enqueue(rec, "INV-1", copy_to=3)  # error: copy_to is a str or None
    send_invoice.job(rec, "INV-1", bogus=True)  # error: no such parameter
    send_invoice.workable("INV-1", "ops@example.com")  # error: copy_to is keyword-only
    ping.enqueue(rec, JobContext("j", 1, "w", "g"), 1)  # error: the context is no argument of the job
    handle: AsyncJobHandle = send_invoice.enqueue(rec, "INV-1")  # error: a Recruiter gives a JobHandle
    send_invoice.enqueue(arec, "INV-1").wait()  # error: an AsyncRecruiter gives an awaitable
    send_invoice(invoice_id=2)  # error: the plain call is typed too
    print(handle)
