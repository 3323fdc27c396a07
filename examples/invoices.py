"""Billing jobs: sending invoices through a (simulated) payment gateway.

The gateway is flaky in a way that depends only on the invoice number, so every
run of the demo behaves the same:

- most invoices go through on the first attempt;
- every fourth invoice times out once, then goes through on its retry;
- invoices whose number ends in 7 time out every time, and end in ``archived``
  as ``tried-too-many-times`` once the backoff policy gives up.

:class:`VoidInvoice` always fails with :class:`InvoiceAlreadyPaid`, a business
error that no retry can fix: its retry policy only retries gateway timeouts, so
the job is archived as ``non-retriable-exception`` after one attempt.
"""

from __future__ import annotations

import time

from recruiter import JobContext, Workable
from recruiter.retry import ExponentialBackoff, RetriableExceptionFilter


class GatewayTimeout(Exception):
    """The payment gateway did not answer in time; trying again later may work."""


class InvoiceAlreadyPaid(Exception):
    """The invoice cannot be changed any more; trying again will not help."""


# Retry up to 3 times, waiting 200 ms, 400 ms, then 800 ms (the demo must be quick;
# a real application would rather wait seconds or minutes).
GATEWAY_BACKOFF = ExponentialBackoff(times=3, initial="200ms")

# Retry gateway timeouts as above; archive any other error at once.
ONLY_GATEWAY_TIMEOUTS = RetriableExceptionFilter(GATEWAY_BACKOFF, exceptions=[GatewayTimeout])


def gateway_latency_s(invoice_number: int) -> float:
    """How long the simulated gateway takes for this invoice: 50 to 200 ms."""
    return 0.05 + (invoice_number * 37 % 16) / 100


class SendInvoice(Workable):
    """Charge a customer for an invoice and send it by e-mail."""

    def __init__(self, invoice_number: int, customer: str, amount_cents: int) -> None:
        self.invoice_number = invoice_number
        self.customer = customer
        self.amount_cents = amount_cents

    def execute(self, ctx: JobContext) -> dict[str, object]:
        time.sleep(gateway_latency_s(self.invoice_number))
        if self.invoice_number % 10 == 7:
            raise GatewayTimeout(f"gateway timed out charging invoice {self.invoice_number} (attempt {ctx.attempt})")
        if self.invoice_number % 4 == 0 and ctx.attempt == 1:
            raise GatewayTimeout(f"gateway timed out charging invoice {self.invoice_number}, first attempt")
        # The return value is stored as the job's `result` in `archived` (keep it small).
        return {"invoice": self.invoice_number, "charged_cents": self.amount_cents, "attempt": ctx.attempt}


class VoidInvoice(Workable):
    """Cancel an invoice; in this example it has always been paid already."""

    def __init__(self, invoice_number: int, reason: str) -> None:
        self.invoice_number = invoice_number
        self.reason = reason

    def execute(self) -> None:  # `ctx` is optional: leave it out when the job does not need it
        time.sleep(0.05)
        raise InvoiceAlreadyPaid(f"invoice {self.invoice_number} is paid; it cannot be voided ({self.reason})")
