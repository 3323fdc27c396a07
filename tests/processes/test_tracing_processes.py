"""Tracing with the real worker process (docs/operations/tracing.md): an SDK set up by a module
named with ``worker start --preload`` records the worker's spans, which continue the trace of the
enqueue; the job runs in its attempt's span, in a thread or in a child process."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from recruiter import Recruiter
from tests.conftest import wait_for
from tests.processes.conftest import FAST_WORKER, Processes
from tests.tracing_setup import SPANS_FILE
from tests.tracing_workables import SeesItsSpan


def read_spans(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_a_worker_continues_the_trace_of_the_enqueue(processes: Processes, db: Any, db_uri: str, tmp_path: Path,
                                                     isolation: str) -> None:
    spans_file = tmp_path / "spans.jsonl"
    # The producer here has a span of its own provider but no global SDK: the context travels as it is.
    tracer = TracerProvider().get_tracer("tests")
    with Recruiter.connect(db_uri) as rec, tracer.start_as_current_span("request") as request:
        job = rec.enqueue(SeesItsSpan())
    trace_id, request_id = (f"{request.get_span_context().trace_id:032x}",
                            f"{request.get_span_context().span_id:016x}")
    processes.recruiter()
    worker = processes.start("worker", "worker", "start", *FAST_WORKER, "--preload", "tests.tracing_setup",
                             "--isolation", isolation, env={SPANS_FILE: str(spans_file)})
    archived = wait_for(lambda: db.archived.find_one({"_id": job}), message="the job archived")
    assert archived["why"] == "done"
    spans = wait_for(lambda: (s := read_spans(spans_file)) and {x["name"] for x in s} >= {
        "generic queued", "generic process", "inside"} and s, message="the spans written")
    by_name = {s["name"]: s for s in spans}
    process, queued, inside = by_name["generic process"], by_name["generic queued"], by_name["inside"]
    assert process["kind"] == "CONSUMER"
    assert queued["kind"] == "INTERNAL"
    assert process["trace_id"] == queued["trace_id"] == inside["trace_id"] == trace_id
    assert process["parent_id"] == queued["parent_id"] == request_id
    assert process["attributes"]["messaging.message.id"] == str(job)
    assert process["pid"] == worker.pid
    # The job saw its attempt's span current, and its own span is that span's child: made in the
    # worker (thread) or in the child process, whose SDK the job's module set up at its import.
    assert archived["result"] == {"valid": True, "trace_id": trace_id, "span_id": process["span_id"]}
    assert inside["parent_id"] == process["span_id"]
    assert (inside["pid"] == worker.pid) is (isolation == "thread")
    assert inside["pid"] != os.getpid()
