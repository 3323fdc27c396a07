"""OpenTelemetry tracing (recruiter.tracing): the enqueue's trace context travels in the job, and a
worker continues it, with the job's own spans nested in its attempt's span.

The spans are recorded in memory by an SDK ``TracerProvider`` that each test makes the global one
for its duration (``opentelemetry.trace.get_tracer_provider`` patched, so no other test sees it);
the jobs run in a real recruiter and worker in this process (recruiter.testing.drain).
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, StatusCode, TraceFlags

from recruiter import AsyncRecruiter, Recruiter
from recruiter.retry import RetryManyTimes
from recruiter.testing import drain, drain_async
from recruiter.testing.drain import Drained
from recruiter.tracing import FIELD, checked_carrier, stored_context
from tests.conftest import wait_for_async
from tests.tracing_workables import AsyncSeesItsSpan, FailsWithSpan, SeesItsSpan
from tests.workables import AsyncWaitForRelease, Record

TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    yield exporter
    provider.shutdown()


def hex_ids(span: ReadableSpan) -> tuple[str, str]:
    assert span.context is not None
    return f"{span.context.trace_id:032x}", f"{span_id(span):016x}"


def parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


def attrs(span: ReadableSpan | Event) -> dict[str, Any]:
    return dict(span.attributes or {})


def drain_all(db_uri: str, db: Any) -> Drained:
    """Drain until nothing waits in ``scheduled``: a drain given no jobs stops at once when those
    waiting are not due yet by its own clock (calibrated apart from the producer's)."""
    jobs: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while db.scheduled.count_documents({}) and time.monotonic() < deadline:
        jobs += drain(db_uri).jobs
    assert db.scheduled.count_documents({}) == 0, "jobs left in scheduled"
    return Drained(jobs=tuple(jobs), enqueued=())


def results(drained: Drained) -> list[object]:
    """The results of the jobs a drain ran (enqueued before it), in the order they were archived."""
    return [d.get("result") for d in drained.jobs]


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_a_job_continues_the_trace_of_its_enqueue_and_its_own_spans_nest(
        db_uri: str, db: Any, spans: InMemorySpanExporter) -> None:
    with Recruiter.connect(db_uri) as rec, trace.get_tracer("tests").start_as_current_span("request") as request:
        sync_job, async_job = rec.enqueue_many([SeesItsSpan("inside sync"),
                                                SeesItsSpan("unused").as_job_of(rec).in_group("other")
                                                .for_tenant("acme")])
        # enqueue too, and an async job
        async_one = AsyncSeesItsSpan("inside async").as_job_of(rec).enqueue()
    drained = drain_all(db_uri, db)
    assert sorted(map(str, (d["_id"] for d in drained.jobs))) == sorted(map(str, (sync_job, async_job, async_one)))
    trace_id = f"{request.get_span_context().trace_id:032x}"

    for job_id, group in ((sync_job, "generic"), (async_job, "other"), (async_one, "generic")):
        archived = db.archived.find_one({"_id": job_id})
        # The field is a flat document of short strings: the W3C traceparent (and tracestate, none here).
        assert set(archived[FIELD]) == {"traceparent"}
        match = TRACEPARENT.match(archived[FIELD]["traceparent"])
        assert match is not None
        stored_trace, stored_span = match.groups()
        assert stored_trace == trace_id
        (create,) = [s for s in named(spans, f"{group} create") if attrs(s)["messaging.message.id"] == str(job_id)]
        (queued,) = [s for s in named(spans, f"{group} queued") if attrs(s)["messaging.message.id"] == str(job_id)]
        (process,) = [s for s in named(spans, f"{group} process")
                      if attrs(s)["messaging.message.id"] == str(job_id)]
        # create (PRODUCER) is a child of the enqueuing span; queued and process are children of create.
        assert create.kind is SpanKind.PRODUCER
        assert parent_id(create) == request.get_span_context().span_id
        assert hex_ids(create) == (trace_id, stored_span)
        assert queued.kind is SpanKind.INTERNAL
        assert process.kind is SpanKind.CONSUMER
        assert hex_ids(queued)[0] == hex_ids(process)[0] == trace_id
        assert parent_id(queued) == parent_id(process) == span_id(create)
        assert queued.end_time == process.start_time
        assert (queued.start_time or 0) <= (queued.end_time or 0)
        assert process.status.status_code is StatusCode.UNSET
        assert {k: attrs(process)[k] for k in ("messaging.system", "messaging.operation.type",
                                                   "messaging.destination.name", "recruiter.job.class",
                                                   "recruiter.job.attempt", "recruiter.job.outcome")} == {
            "messaging.system": "recruiter", "messaging.operation.type": "process",
            "messaging.destination.name": group, "recruiter.job.attempt": 1, "recruiter.job.outcome": "done",
            "recruiter.job.class": archived["workable"]["class"]}
        assert attrs(queued)["messaging.operation.type"] == "receive"
        assert attrs(process)["recruiter.worker.id"] == archived["last_execution"]["worker"]
        # The job ran in the attempt's span: it saw it current, and its own span is its child.
        assert archived["result"] == {"valid": True, "trace_id": trace_id, "span_id": hex_ids(process)[1]}
        if group == "other":
            assert attrs(process)["recruiter.tenant"] == "acme"
            continue
        (inside,) = named(spans, "inside sync" if job_id == sync_job else "inside async")
        assert parent_id(inside) == span_id(process)
        assert hex_ids(inside)[0] == trace_id


def test_a_failed_attempt_has_an_error_status_and_its_exception_and_each_attempt_its_span(
        db_uri: str, db: Any, spans: InMemorySpanExporter) -> None:
    with Recruiter.connect(db_uri) as rec, trace.get_tracer("tests").start_as_current_span("request"):
        job = FailsWithSpan().as_job_of(rec).retry_with(RetryManyTimes(1, wait=0)).enqueue()
    assert [d["why"] for d in drain_all(db_uri, db).jobs] == ["tried-too-many-times"]
    processes = sorted(named(spans, "generic process"), key=lambda s: s.start_time or 0)
    assert [attrs(s)["recruiter.job.attempt"] for s in processes] == [1, 2]
    assert len(named(spans, "generic queued")) == 2
    (create,) = named(spans, "generic create")
    for n, span in enumerate(processes, start=1):
        assert parent_id(span) == span_id(create)
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == f"failed: failed attempt {n}"
        assert attrs(span)["recruiter.job.outcome"] == "failed"
        assert attrs(span)["error.type"] == "builtins:ValueError"
        (event,) = span.events
        assert event.name == "exception"
        assert attrs(event)["exception.message"] == f"failed attempt {n}"
        assert "ValueError" in str(attrs(event)["exception.stacktrace"])
    befores = named(spans, "before failing")
    assert sorted(parent_id(s) or 0 for s in befores) == sorted(span_id(s) for s in processes)
    assert db.archived.count_documents({"_id": job}) == 1


def test_a_job_run_in_a_child_process_runs_in_its_attempt_span(db_uri: str, db: Any,
                                                               spans: InMemorySpanExporter) -> None:
    # A synchronous job with a timeout runs in a child process (as every job does with --isolation process).
    with Recruiter.connect(db_uri) as rec, trace.get_tracer("tests").start_as_current_span("request"):
        job = SeesItsSpan().as_job_of(rec).with_timeout(60).enqueue()
    (seen,) = results(drain_all(db_uri, db))
    (process,) = named(spans, "generic process")
    assert seen == {"valid": True, "trace_id": hex_ids(process)[0], "span_id": hex_ids(process)[1]}
    assert db.archived.find_one({"_id": job})["why"] == "done"
    # The child has no SDK of its own here: its span is not recorded (docs/operations/tracing.md).
    assert named(spans, "inside") == []


GARBAGE: list[object] = [
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", 42, None, [], {},
    {"traceparent": 7}, {"traceparent": "not a traceparent"},
    {"traceparent": "00-" + "0" * 32 + "-" + "0" * 16 + "-01"},
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" + "x" * 10_000},
    {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": {"a": 1}},
    {"traceparent": "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "x" * 100_000},
]


def test_a_job_with_a_garbage_trace_context_still_runs(db_uri: str, db: Any, spans: InMemorySpanExporter) -> None:
    with Recruiter.connect(db_uri) as rec:
        ids = [Record(db_uri, n=i).as_job_of(rec).enqueue() for i in range(len(GARBAGE))]
    for job_id, value in zip(ids, GARBAGE, strict=True):
        db.scheduled.update_one({"_id": job_id}, {"$set": {FIELD: value}})
    drained = drain_all(db_uri, db)
    assert [d["why"] for d in drained.jobs] == ["done"] * len(GARBAGE)
    assert sorted(results(drained)) == list(range(len(GARBAGE)))  # type: ignore[type-var]
    by_job = {attrs(s)["messaging.message.id"]: s for s in named(spans, "generic process")}
    assert set(by_job) == {str(i) for i in ids}
    # A well-formed context in a malformed field (a tracestate that is not a string) is still continued;
    # everything else starts a trace of its own.
    kept = str(ids[9])
    assert f"{parent_id(by_job[kept]) or 0:016x}" == "b7ad6b7169203331"
    assert all(span.parent is None for job_id, span in by_job.items() if job_id != kept)


def test_without_a_current_span_nothing_is_stored_and_schedules_carry_no_trace_context(
        db_uri: str, db: Any, spans: InMemorySpanExporter) -> None:
    with Recruiter.connect(db_uri) as rec:
        plain = Record(db_uri, n=1).as_job_of(rec).enqueue()
        with trace.get_tracer("tests").start_as_current_span("declaring"):
            rec.schedule("nightly", job=Record(db_uri, n=2), every="1h")
    assert FIELD not in db.scheduled.find_one({"_id": plain})
    stored = list(db.schedules.find())
    assert len(stored) == 1
    assert FIELD not in str(stored)
    assert [s.name for s in spans.get_finished_spans()] == ["declaring"]


def test_with_the_api_and_no_sdk_the_context_travels_and_no_span_is_made(db_uri: str, db: Any,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: trace.ProxyTracerProvider())
    incoming = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, is_remote=True,
                           trace_flags=TraceFlags(TraceFlags.SAMPLED))
    with Recruiter.connect(db_uri) as rec, trace.use_span(NonRecordingSpan(incoming)):
        job = SeesItsSpan().as_job_of(rec).enqueue()
    stored = db.scheduled.find_one({"_id": job})[FIELD]
    assert stored == {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    # The worker makes no span: the job runs with none current.
    assert results(drain_all(db_uri, db)) == [{"valid": False, "trace_id": "0" * 32, "span_id": "0" * 16}]


def test_the_stored_context_is_read_as_untrusted_input() -> None:
    good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert checked_carrier({"traceparent": good, "tracestate": "k=v", "baggage": "x"}) == {
        "traceparent": good, "tracestate": "k=v"}
    assert checked_carrier({"traceparent": good, "tracestate": "k" * 513}) == {"traceparent": good}
    for value in GARBAGE[:7]:
        assert checked_carrier(value) is None or stored_context({FIELD: value}) is None
    context = stored_context({FIELD: {"traceparent": good}})
    assert context is not None
    assert trace.get_current_span(context).get_span_context().span_id == 0xB7AD6B7169203331


def test_the_library_works_without_opentelemetry(db_uri: str) -> None:
    """With OpenTelemetry not installed (imports of it fail), and without importing it itself."""
    script = textwrap.dedent(f"""
        import importlib.abc, sys
        class NoOpenTelemetry(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "opentelemetry":
                    raise ImportError("no opentelemetry here")
        sys.meta_path.insert(0, NoOpenTelemetry())
        from recruiter import Recruiter
        from recruiter.testing import drain
        from tests.workables import Record
        with Recruiter.connect({db_uri!r}) as rec:
            job = Record({db_uri!r}, n=5).as_job_of(rec).with_timeout(60).enqueue()
            rec.enqueue_many([Record({db_uri!r}, n=6)])
        jobs = []
        while len(jobs) < 2:  # a drain given no jobs stops at once if they are not due by its own clock
            jobs += drain({db_uri!r}).jobs
        assert sorted(d["result"] for d in jobs) == [5, 6], jobs
        assert all("trace_context" not in d for d in jobs)
        assert not [m for m in sys.modules if m.startswith("opentelemetry")]
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False,
                          cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")


def test_the_asyncio_producer_stores_the_context_too(db_uri: str, db: Any, spans: InMemorySpanExporter) -> None:
    async def main() -> tuple[int, list[Any]]:
        async with await AsyncRecruiter.connect(db_uri) as rec:
            with trace.get_tracer("tests").start_as_current_span("request") as request:
                one = await rec.enqueue(SeesItsSpan())
                many = await rec.enqueue_many([SeesItsSpan(), SeesItsSpan().as_job_of(rec).unique("k")])
        return request.get_span_context().trace_id, [one, *many]

    trace_id, ids = asyncio.run(main())
    creates = {attrs(s)["messaging.message.id"]: s for s in named(spans, "generic create")}
    for job_id in ids:
        match = TRACEPARENT.match(db.scheduled.find_one({"_id": job_id})[FIELD]["traceparent"])
        assert match is not None
        assert match.groups() == (f"{trace_id:032x}", hex_ids(creates[str(job_id)])[1])


def test_an_attempt_cut_short_by_a_cancel_says_halted(db_uri: str, db: Any, spans: InMemorySpanExporter) -> None:
    with Recruiter.connect(db_uri) as rec:
        job = AsyncWaitForRelease(db_uri, "never").as_job_of(rec).enqueue()

        async def drained() -> None:
            while await asyncio.to_thread(db.scheduled.count_documents, {}):  # see drain_all
                await drain_async(db_uri)

        async def main() -> None:
            draining = asyncio.create_task(drained())
            await wait_for_async(lambda: asyncio.to_thread(db.ledger.find_one, {"event": "start"}),
                                 message="the job to start")
            await asyncio.to_thread(rec.cancel, job)
            await draining

        asyncio.run(main())
    assert db.archived.find_one({"_id": job})["why"] == "cancelled"
    (process,) = named(spans, "generic process")
    assert attrs(process)["recruiter.job.outcome"] == "halted"
    assert process.status.status_code is StatusCode.UNSET
    assert process.end_time is not None


class Broken(SpanProcessor):
    """A span processor that raises on every span."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        raise RuntimeError("broken processor")


def test_a_failing_sdk_neither_fails_an_enqueue_nor_changes_an_outcome(db_uri: str, db: Any,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    provider = TracerProvider()
    provider.add_span_processor(Broken())
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    incoming = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, is_remote=True,
                           trace_flags=TraceFlags(TraceFlags.SAMPLED))
    with Recruiter.connect(db_uri) as rec, trace.use_span(NonRecordingSpan(incoming)):
        job = Record(db_uri, n=3).as_job_of(rec).enqueue()
    assert FIELD not in db.scheduled.find_one({"_id": job})
    assert results(drain_all(db_uri, db)) == [3]
