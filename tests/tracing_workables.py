"""Jobs for the tracing tests (tests/integration/test_tracing.py, tests/processes/test_tracing_processes.py):
they say what span is current while they run, and make a span of their own (importable by name, as
jobs must be). Importing them imports tests.tracing_setup, as a job's module may set up its SDK."""

from __future__ import annotations

from typing import Any

from opentelemetry import trace

import tests.tracing_setup  # noqa: F401 - in a child process running a job, the SDK it may set up
from recruiter import JobContext, Workable


def _current() -> dict[str, Any]:
    """The span current in the job: its trace and span ids (hex), and whether it is valid."""
    found = trace.get_current_span().get_span_context()
    return {"valid": found.is_valid, "trace_id": f"{found.trace_id:032x}", "span_id": f"{found.span_id:016x}"}


class SeesItsSpan(Workable):
    """Returns the span current while it runs, after making a span ``inside`` of its own."""

    def __init__(self, name: str = "inside") -> None:
        self.name = name

    def execute(self, ctx: JobContext) -> dict[str, Any]:
        seen = _current()
        with trace.get_tracer("tests.job").start_as_current_span(self.name):
            pass
        return seen


class AsyncSeesItsSpan(SeesItsSpan):
    async def execute(self, ctx: JobContext) -> dict[str, Any]:  # type: ignore[override]
        seen = _current()
        with trace.get_tracer("tests.job").start_as_current_span(self.name):
            pass
        return seen


class FailsWithSpan(Workable):
    """Makes its span, then fails."""

    def execute(self, ctx: JobContext) -> None:
        with trace.get_tracer("tests.job").start_as_current_span("before failing"):
            pass
        raise ValueError(f"failed attempt {ctx.attempt}")
