"""What OpenTelemetry tracing (recruiter.tracing) costs per job, in three setups side by side.

``python -m bench.tracing_cost [--jobs 300] [--rounds 3] [--micro 20000]`` runs, for each setup, a
child Python process that enqueues ``--jobs`` no-op jobs one by one (``rec.enqueue``) and runs them
with a real recruiter and worker in that process (:func:`recruiter.testing.drain`), and then times
the tracing code alone (:func:`recruiter.tracing.stamp` on a built job, and one
:func:`recruiter.tracing.attempt_spans` around nothing) ``--micro`` times. The setups:

- ``none``: OpenTelemetry never imported (as when it is not installed);
- ``api``: the API imported, no SDK; the jobs are enqueued inside a valid (non-recording) span
  context, as propagated from an incoming request: the context is stored, no span is made;
- ``sdk``: an SDK ``TracerProvider`` with a ``SimpleSpanProcessor`` into an exporter that discards
  the spans (each handed over synchronously at its end: the SDK's cost, no exporter's); the jobs
  are enqueued inside a span: a ``create`` span per enqueue, ``queued`` and ``process`` spans per
  attempt.

The setups take turns in each round (so a slower minute of a shared machine hits them all); the
figures printed are the medians over the rounds, and each setup's ratio to ``none``. Uses the
embedded server, or ``RECRUITER_TEST_MONGODB_URI``.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import click

SETUPS = ("none", "api", "sdk")
REPO = Path(__file__).resolve().parents[1]


def _setup(kind: str) -> Callable[[], AbstractContextManager[object]]:
    """Make ``kind`` the process's tracing setup; returns what makes the context to enqueue in."""
    if kind == "none":
        return contextlib.nullcontext
    from opentelemetry import trace

    if kind == "api":
        incoming = trace.SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, is_remote=True,
                                     trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED))
        return lambda: trace.use_span(trace.NonRecordingSpan(incoming))
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class Discard(SpanExporter):
        """Takes every span and keeps none: the SDK's own cost, without an exporter's."""

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Discard()))
    trace.set_tracer_provider(provider)
    return lambda: trace.get_tracer("bench").start_as_current_span("request")


def _micro(n: int) -> dict[str, float]:
    """The tracing code alone, per job: storing the context, and an attempt's spans (µs)."""
    from bench.jobs import Noop
    from recruiter import tracing
    from recruiter.domain.clock import SystemClock
    from recruiter.domain.job import JobOptions, build_job_document

    doc = dict(build_job_document(Noop(), JobOptions(), SystemClock().now()))
    began = time.perf_counter()
    for _ in range(n):
        tracing.stamp(doc)
    stamp_us = (time.perf_counter() - began) / n * 1e6
    began = time.perf_counter()
    for _ in range(n):
        with tracing.attempt_spans(doc, "bench", 0.01) as span:
            span.ended("done", None)
    attempt_us = (time.perf_counter() - began) / n * 1e6
    return {"stamp_us": stamp_us, "attempt_us": attempt_us, "stored": tracing.FIELD in doc}


def _child(kind: str, uri: str, jobs: int, micro: int) -> dict[str, Any]:
    from bench.jobs import Noop
    from recruiter import Recruiter
    from recruiter.testing import drain

    enqueuing = _setup(kind)
    with Recruiter.connect(uri) as rec:
        rec.max_document_bytes()  # read once per producer: not timed
        with enqueuing():
            drain(uri, [Noop()])  # the first job, the worker's imports: not timed
        with enqueuing():
            began = time.perf_counter()
            for _ in range(jobs):
                rec.enqueue(Noop())
            enqueue_s = time.perf_counter() - began
        began = time.perf_counter()
        ran = 0
        for _ in range(5):  # a drain stops at once when the last jobs are not due yet by its own clock
            ran += len(drain(uri, timeout_s=600).jobs)
            if ran >= jobs:
                break
        run_s = time.perf_counter() - began
        rec.client.drop_database(rec.db.name)
    with enqueuing():
        figures = _micro(micro)
    return {"setup": kind, "jobs": jobs, "ran": ran, "enqueue_us": enqueue_s / jobs * 1e6,
            "run_ms": run_s / jobs * 1e3, **figures,
            "otel_imported": any(m.startswith("opentelemetry") for m in sys.modules)}


def _run_child(kind: str, uri: str, jobs: int, micro: int) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "bench.tracing_cost", "--child", kind, "--uri", uri,
                           "--jobs", str(jobs), "--micro", str(micro)], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, check=False, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"bench: the {kind} run failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _table(runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    keys = ("enqueue_us", "run_ms", "stamp_us", "attempt_us")
    median = {kind: {k: statistics.median(r[k] for r in rs) for k in keys} for kind, rs in runs.items()}
    base = median["none"]
    lines = [f"{'setup':<6} {'enqueue µs/job':>15} {'ratio':>6} {'run ms/job':>11} {'ratio':>6} "
             f"{'tracing code µs/job (store + attempt)':>40}"]
    for kind in SETUPS:
        m = median[kind]
        lines.append(f"{kind:<6} {m['enqueue_us']:>15.0f} {m['enqueue_us'] / base['enqueue_us']:>6.2f} "
                     f"{m['run_ms']:>11.2f} {m['run_ms'] / base['run_ms']:>6.2f} "
                     f"{m['stamp_us']:>22.2f} + {m['attempt_us']:.2f}")
    return lines


@click.command()
@click.option("--jobs", default=300, show_default=True, help="Jobs enqueued and run per setup and round.")
@click.option("--rounds", default=3, show_default=True, help="Rounds; each runs every setup once.")
@click.option("--micro", default=20_000, show_default=True, help="Iterations of the tracing code alone.")
@click.option("--child", type=click.Choice(SETUPS), default=None, hidden=True)
@click.option("--uri", default=None, hidden=True)
def main(jobs: int, rounds: int, micro: int, child: str | None, uri: str | None) -> None:
    if child is not None:
        if uri is None:
            raise click.UsageError("--child needs --uri")
        print(json.dumps(_child(child, uri, jobs, micro)))
        return
    from bench.server import running_server

    with running_server() as server:
        print(f"server: {server.description}; {jobs} no-op jobs per setup and round, {rounds} rounds")
        runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in SETUPS}
        for n in range(rounds):
            order = SETUPS[n % len(SETUPS):] + SETUPS[:n % len(SETUPS)]
            for kind in order:
                result = _run_child(kind, server.database_uri(f"bench_tracing_{kind}_{n}"), jobs, micro)
                if result["ran"] != jobs or result["otel_imported"] != (kind != "none"):
                    raise SystemExit(f"bench: the {kind} run is not what it should be: {result}")
                runs[kind].append(result)
        print("\n".join(_table(runs)))
        print(json.dumps({"jobs": jobs, "rounds": rounds, "micro": micro, "runs": runs}))


if __name__ == "__main__":
    main()
