"""OpenTelemetry tracing of jobs, for applications that use OpenTelemetry (the ``otel`` extra).

The producer stores the W3C trace context of the span current at enqueue in the job, in the
field ``trace_context``: a flat document of at most two short strings, ``traceparent`` and,
when there is one, ``tracestate`` (:func:`stamp`). With an SDK it first makes a ``<group>
create`` span (``PRODUCER``), a child of the current span, and stores that one's context. The
worker continues the trace (:func:`attempt_spans`): a ``<group> queued`` span for the time the
job waited (from its due time to the start of the attempt) and a ``<group> process`` span
(``CONSUMER``) for each attempt, both children of the stored context, the attempt's code run
in the context of the second, so the spans the job makes are its children. Attributes follow
OpenTelemetry's messaging conventions where they fit. docs/operations/tracing.md has the list.

Costs: nothing imports OpenTelemetry unless the application did. With it not installed, or
installed and never imported, every function here returns at once: no field, no span. With
the API but no SDK (the global tracer provider is still the API's proxy), the producer stores
a valid current context (the API propagates without an SDK) and the worker makes no span.
Only the W3C trace context propagator is used, never the global one: baggage (the
application's own data) and other formats stay out of the job document.

Invariants: a stored ``trace_context`` is untrusted input (another producer, a hand edit): a
value that is not a document of short strings with a valid ``traceparent`` is ignored, never
raised on. A failure of the tracing code itself (an SDK's span processor raising, say) is
logged and swallowed: it never fails an enqueue or changes an attempt's outcome.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = structlog.get_logger("recruiter.tracing")

FIELD = "trace_context"
TRACER_NAME = "recruiter"
MESSAGING_SYSTEM = "recruiter"  # not one of the convention's well-known values: a custom one
# A version 00 traceparent has 55 characters; later versions may add fields, this allows room.
MAX_TRACEPARENT_CHARS = 128
# The W3C recommendation: propagate a tracestate of at most 512 characters (32 entries).
MAX_TRACESTATE_CHARS = 512

_tracers: tuple[object, Tracer] | None = None  # (the provider, its tracer "recruiter")
_propagator: TraceContextTextMapPropagator | None = None


def _failed(where: str, exc: Exception) -> None:
    """A failure of the tracing code (an SDK's span processor raising, say): one line, the traceback at debug."""
    with contextlib.suppress(Exception):
        log.warning("tracing.failed", where=where, error=f"{type(exc).__name__}: {exc}"[:300])
        log.debug("tracing.traceback", where=where, exc_info=exc)


def _loaded() -> bool:
    """Whether the process imported OpenTelemetry's trace API: if not, no span can be current
    and no provider can be set, so there is nothing to do (and nothing is imported)."""
    return sys.modules.get("opentelemetry.trace") is not None


def _tracer() -> Tracer | None:
    """The tracer ``recruiter`` of the global provider; None while that is the API's proxy (no SDK)."""
    global _tracers
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):
        return None
    cached = _tracers
    if cached is None or cached[0] is not provider:
        cached = _tracers = (provider, provider.get_tracer(TRACER_NAME))
    return cached[1]


def _w3c() -> TraceContextTextMapPropagator:
    """The W3C trace context propagator (made once)."""
    global _propagator
    if _propagator is None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        _propagator = TraceContextTextMapPropagator()
    return _propagator


def _carrier(context: Context | None = None) -> dict[str, str] | None:
    """The W3C trace context of ``context`` (default: the current one), checked; None if it has none."""
    carrier: dict[str, str] = {}
    _w3c().inject(carrier, context)
    return checked_carrier(carrier)


def checked_carrier(value: object) -> dict[str, str] | None:
    """``traceparent`` and ``tracestate`` of a stored ``trace_context``, if they are short strings
    (a ``tracestate`` that is not is dropped); None when there is no usable ``traceparent``."""
    if not isinstance(value, Mapping):
        return None
    parent, state = value.get("traceparent"), value.get("tracestate")
    if not isinstance(parent, str) or not 0 < len(parent) <= MAX_TRACEPARENT_CHARS:
        return None
    carrier = {"traceparent": parent}
    if isinstance(state, str) and 0 < len(state) <= MAX_TRACESTATE_CHARS:
        carrier["tracestate"] = state
    return carrier


def _group(job: Mapping[str, object]) -> str:
    """The group the job was enqueued in (a job aimed at a worker keeps it in ``on_worker``)."""
    on_worker = job.get("on_worker")
    declared = on_worker.get("group") if isinstance(on_worker, Mapping) else None
    group = declared if isinstance(declared, str) else job.get("group")
    return group if isinstance(group, str) else ""


def _attributes(job: Mapping[str, object], operation: str) -> dict[str, str | int]:
    workable = job.get("workable")
    cls = workable.get("class") if isinstance(workable, Mapping) else None
    attributes: dict[str, str | int] = {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.operation.type": operation,
        "messaging.destination.name": _group(job),
        "messaging.message.id": str(job.get("_id")),
    }
    if isinstance(cls, str):
        attributes["recruiter.job.class"] = cls
    if isinstance(tenant := job.get("tenant"), str):
        attributes["recruiter.tenant"] = tenant
    return attributes


# -- the producer --------------------------------------------------------------------------------

def stamp(doc: dict[str, object]) -> None:
    """Store the current trace context in the job ``doc`` about to be enqueued (see the module);
    nothing when no valid span is current."""
    if not _loaded():
        return
    try:
        carrier = _enqueue_context(doc)
    except Exception as exc:  # noqa: BLE001 - tracing never fails an enqueue
        _failed("enqueue", exc)
        return
    if carrier is not None:
        doc[FIELD] = carrier


def _enqueue_context(doc: Mapping[str, object]) -> dict[str, str] | None:
    from opentelemetry import trace

    if not trace.get_current_span().get_span_context().is_valid:
        return None
    tracer = _tracer()
    if tracer is not None:
        span = tracer.start_span(f"{_group(doc)} create", kind=trace.SpanKind.PRODUCER,
                                 attributes=_attributes(doc, "create"))
        span.end()
        if span.get_span_context().is_valid:
            return _carrier(trace.set_span_in_context(span))
    return _carrier()


# -- the worker ----------------------------------------------------------------------------------

def stored_context(job: Mapping[str, object]) -> Context | None:
    """The context the job's ``trace_context`` holds, if it is a valid one; None otherwise."""
    carrier = checked_carrier(job.get(FIELD))
    if carrier is None or not _loaded():
        return None
    from opentelemetry import trace

    try:
        context = _w3c().extract(carrier)
    except Exception:  # noqa: BLE001 - untrusted input: a value the propagator cannot read is no context
        return None
    return context if trace.get_current_span(context).get_span_context().is_valid else None


class AttemptSpan:
    """The span of one attempt, to say how it ended (:meth:`ended`); does nothing without one."""

    def __init__(self, span: Span | None = None) -> None:
        self.span = span

    def ended(self, kind: str, error: BaseException | None) -> None:
        """The attempt ended ``kind`` (done, failed, timed-out; halted or interrupted: cut short),
        with ``error`` if it failed."""
        if self.span is None:
            return
        try:
            _ended(self.span, kind, error)
        except Exception as exc:  # noqa: BLE001 - tracing never changes an attempt's outcome
            _failed("attempt end", exc)


def _ended(span: Span, kind: str, error: BaseException | None) -> None:
    from opentelemetry.trace import Status, StatusCode

    from recruiter.domain.attempt import describe_exception

    span.set_attribute("recruiter.job.outcome", kind)
    if error is None:
        return
    cls, message, trace = describe_exception(error)
    span.set_attribute("error.type", cls)
    span.record_exception(error, attributes={"exception.type": cls, "exception.message": message,
                                             "exception.stacktrace": trace})
    span.set_status(Status(StatusCode.ERROR, f"{kind}: {message}"[:256]))


@contextlib.contextmanager
def attempt_spans(job: Mapping[str, object], worker_id: str, waited_s: float | None) -> Iterator[AttemptSpan]:
    """Around one attempt of ``job`` by the slot ``worker_id``: the ``queued`` span (``waited_s``
    long, ending now; none when None) and the ``process`` span, current inside the block."""
    tracer = _tracer() if _loaded() else None
    if tracer is None:
        yield AttemptSpan()
        return
    try:
        span = _start_spans(tracer, job, worker_id, waited_s)
    except Exception as exc:  # noqa: BLE001 - tracing never fails an attempt
        _failed("attempt start", exc)
        yield AttemptSpan()
        return
    yield from _current(span)


def _start_spans(tracer: Tracer, job: Mapping[str, object], worker_id: str, waited_s: float | None) -> Span:
    from opentelemetry.trace import SpanKind

    parent = stored_context(job)
    group = _group(job)
    attempt = job.get("attempts")
    now_ns = time.time_ns()
    if waited_s is not None:
        queued = tracer.start_span(f"{group} queued", parent, SpanKind.INTERNAL, _attributes(job, "receive"),
                                   start_time=now_ns - max(0, int(waited_s * 1e9)))
        queued.end(end_time=now_ns)
    attributes = {**_attributes(job, "process"), "recruiter.worker.id": worker_id}
    if isinstance(attempt, int | float) and not isinstance(attempt, bool):  # a count: documents.JOB checked it
        attributes["recruiter.job.attempt"] = int(attempt)
    return tracer.start_span(f"{group} process", parent, SpanKind.CONSUMER, attributes, start_time=now_ns,
                             record_exception=False, set_status_on_exception=False)


def _current(span: Span) -> Iterator[AttemptSpan]:
    """``span`` current while the attempt runs; ended when it ends (a halt or a forced stop included)."""
    from opentelemetry import trace

    try:
        with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            yield AttemptSpan(span)
    finally:
        with contextlib.suppress(Exception):
            span.end()


def current_carrier() -> dict[str, str] | None:
    """The trace context of the current span, to hand to a child process (None: no valid span)."""
    if not _loaded():
        return None
    from opentelemetry import trace

    if not trace.get_current_span().get_span_context().is_valid:
        return None
    return _carrier()


@contextlib.contextmanager
def continued(carrier: dict[str, str] | None) -> Iterator[None]:
    """In a child process running an attempt: the attempt span's context (``carrier``) current
    inside the block, so spans the job makes there are its children. Nothing without a carrier
    or without OpenTelemetry (imported here: the job's module may have set up a provider)."""
    if carrier is None:
        yield
        return
    try:
        from opentelemetry import context as otel_context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        token = otel_context.attach(TraceContextTextMapPropagator().extract(carrier))
    except Exception:  # noqa: BLE001 - no OpenTelemetry here, or a context it cannot read
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            otel_context.detach(token)
