# jobs.py: a class job and a dataclass job, as a user writes them.
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from recruiter import JobContext, JobHandle, Recruiter, Workable
from recruiter.retry import ExponentialBackoff


class SendInvoice(Workable):
    group = "myapp"
    retry_policy = ExponentialBackoff(times=3)

    def __init__(self, invoice_id: str, amount_cents: int) -> None:
        self.invoice_id = invoice_id
        self.amount_cents = amount_cents

    def execute(self, ctx: JobContext) -> dict[str, object]:
        return {"sent": self.invoice_id, "cents": self.amount_cents, "attempt": ctx.attempt}


@dataclass
class ResizeImage(Workable):
    image_id: str
    widths: list[int] = field(default_factory=lambda: [320, 640])
    group = "myapp"

    def execute(self) -> list[str]:
        return [f"{self.image_id}@{w}" for w in self.widths]


def send_invoice(rec: Recruiter) -> JobHandle:
    return SendInvoice("INV-7", 1250).as_job_of(rec).tagged("newcomer").enqueue()


def resize(rec: Recruiter) -> JobHandle:
    return rec.enqueue(ResizeImage("img-1", widths=[100, 200]))


EXAMPLES: list[tuple[Callable[[Recruiter], JobHandle], object]] = [
    (send_invoice, {"sent": "INV-7", "cents": 1250, "attempt": 1}),
    (resize, ["img-1@100", "img-1@200"]),
]
