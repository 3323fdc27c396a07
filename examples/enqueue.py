"""Enqueue a mix of the example jobs: ``python -m examples.enqueue --target URI --count N``.

Run it from the repository root (so ``examples`` can be imported), with workers
for the groups ``billing`` and ``reports``::

    recruiter start --target mongodb://127.0.0.1:27017/recruiter
    worker start --group billing --target mongodb://127.0.0.1:27017/recruiter
    worker start --group reports --concurrency 2 --target mongodb://127.0.0.1:27017/recruiter
    python -m examples.enqueue --target mongodb://127.0.0.1:27017/recruiter --count 60

Of N jobs, about a quarter are reports, one in twenty voids an invoice, and the
rest send invoices. All of them are written with one ``insert_many``.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections import Counter

from bson import ObjectId

from examples.invoices import GATEWAY_BACKOFF, ONLY_GATEWAY_TIMEOUTS, SendInvoice, VoidInvoice
from examples.reports import RETRY_TWICE, BuildMonthlyReport
from recruiter import DEFAULT_URI, ConnectionProblem, JobBuilder, JobRefused, Recruiter

CUSTOMERS = ("acme", "globex", "initech")
MONTHS = ("2026-01", "2026-02", "2026-03", "2026-04", "2026-05")
FIRST_INVOICE = 1001


def example_jobs(rec: Recruiter, count: int) -> list[JobBuilder]:
    """``count`` jobs for ``rec``, in the groups ``billing`` and ``reports``.

    Each customer is a tenant, so the recruiter serves customers in turn: a big
    batch for one of them does not starve the others.
    """
    n_voids = max(1, count // 20) if count >= 3 else 0
    n_reports = count // 4
    n_invoices = count - n_voids - n_reports
    customers = itertools.cycle(CUSTOMERS)
    jobs: list[JobBuilder] = []
    for number in range(FIRST_INVOICE, FIRST_INVOICE + n_invoices):
        customer = next(customers)
        jobs.append(
            SendInvoice(invoice_number=number, customer=customer, amount_cents=1000 + number % 97 * 100)
            .as_job_of(rec)
            .in_group("billing")
            .for_tenant(customer)
            .retry_with(GATEWAY_BACKOFF)
        )
    for i in range(n_voids):
        jobs.append(
            VoidInvoice(invoice_number=FIRST_INVOICE + i, reason="customer asked for a refund")
            .as_job_of(rec)
            .in_group("billing")
            .retry_with(ONLY_GATEWAY_TIMEOUTS)
        )
    for customer, month in itertools.islice(itertools.cycle(itertools.product(CUSTOMERS, MONTHS)), n_reports):
        jobs.append(
            BuildMonthlyReport(customer=customer, month=month)
            .as_job_of(rec)
            .in_group("reports")
            .for_tenant(customer)
            .tagged("monthly")
            .retry_with(RETRY_TWICE)
        )
    return jobs


def enqueue_examples(rec: Recruiter, count: int) -> list[ObjectId]:
    """Enqueue ``count`` example jobs in one round trip; returns their ids."""
    return rec.enqueue_many(example_jobs(rec, count))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m examples.enqueue",
                                     description="Enqueue a mix of the example jobs in the groups billing and reports.")
    parser.add_argument("--target", default=DEFAULT_URI, help=f"MongoDB URI (default: {DEFAULT_URI})")
    parser.add_argument("--count", type=int, default=60, help="how many jobs to enqueue (default: 60)")
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error("--count must be at least 1")
    try:
        with Recruiter.connect(args.target) as rec:
            jobs = example_jobs(rec, args.count)
            rec.enqueue_many(jobs)
    except (ConnectionProblem, JobRefused) as exc:  # a bad URI, no server, or a job refused: one line
        sys.exit(f"error: {exc}")
    by_group = Counter(job.options.group for job in jobs)
    print(f"enqueued {len(jobs)} jobs: " + ", ".join(f"{g}={n}" for g, n in sorted(by_group.items())))


if __name__ == "__main__":
    main()
