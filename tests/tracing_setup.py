"""An OpenTelemetry SDK set up at import, as docs/operations/tracing.md tells (``worker start --preload``):
when ``RECRUITER_TEST_SPANS_FILE`` is set, every span this process ends is appended to that file as
one JSON line (its pid included). Without it, importing this module does nothing."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

SPANS_FILE = "RECRUITER_TEST_SPANS_FILE"


class JsonLines(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a") as out:
            for span in spans:
                assert span.context is not None
                out.write(json.dumps({
                    "name": span.name, "kind": span.kind.name, "pid": os.getpid(),
                    "trace_id": f"{span.context.trace_id:032x}", "span_id": f"{span.context.span_id:016x}",
                    "parent_id": None if span.parent is None else f"{span.parent.span_id:016x}",
                    "status": span.status.status_code.name, "attributes": dict(span.attributes or {}),
                }) + "\n")
        return SpanExportResult.SUCCESS


if os.environ.get(SPANS_FILE):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLines(os.environ[SPANS_FILE])))
    trace.set_tracer_provider(provider)
