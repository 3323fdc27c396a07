"""What a job writes, in the process's own log format: in JSON mode, each line a job prints
(``print``, ``sys.stdout``/``sys.stderr``) is logged as one ``job.output`` event, and what it logs
through ``logging`` or structlog carries its ``job_id`` and ``attempt``, so the worker's output
stays one JSON document per line whatever its jobs do. In console mode, printed text passes
through as it was written.

The lines are still kept for the execution (:mod:`recruiter.processes.worker.capture`, bounded);
the events are the process's output, not bounded by that rule.
"""

from __future__ import annotations

import functools

import structlog

from recruiter.processes.worker.capture import OUTPUT_EVENT, LogBuffer

_as_events = False
_log = structlog.get_logger("recruiter.job")


def log_output_as_events(enabled: bool) -> None:
    """Set once by :func:`recruiter.processes.logs.configure`: True when the process logs JSON."""
    global _as_events
    _as_events = enabled


def output_as_events() -> bool:
    return _as_events


def watch(buffer: LogBuffer, job_id: str, attempt: int) -> LogBuffer:
    """Name the attempt ``buffer`` keeps lines for, and, in JSON mode, log its printed lines as events."""
    buffer.fields = {"job_id": job_id, "attempt": attempt}
    if _as_events:
        buffer.echo = functools.partial(_emit, buffer.fields)
    return buffer


def _emit(fields: dict[str, object], stream: str, line: str) -> None:
    _log.info(OUTPUT_EVENT, stream=stream, line=line, **fields)
