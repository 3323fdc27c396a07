"""structlog configuration, called only at the CLI edge; and :class:`AfterCommit`,
which holds the log lines and the events (:mod:`recruiter.domain.events`) a
transaction makes true until it has committed."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator, MutableMapping
from typing import Any, Protocol

import structlog

from recruiter.domain.events import Event
from recruiter.processes.worker.capture import in_attempt, job_fields
from recruiter.processes.worker.output import log_output_as_events

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("auto", "console", "json")


def configure(level: str = "info", fmt: str = "auto") -> None:
    """Configure structlog and the standard ``logging`` module for a process (the CLI's edge).

    Both render alike: JSON documents, one per line, or console lines. What a job logs or
    prints carries its ``job_id`` and ``attempt`` (:mod:`recruiter.processes.worker.output`), and
    its ``logging`` records are shown from ``level`` on; other libraries' records only from
    WARNING on (or from ``level``, at debug)."""
    numeric = getattr(logging, level.upper())
    if fmt == "auto":
        fmt = "console" if sys.stderr.isatty() else "json"
    renderer: structlog.types.Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            job_fields,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info if fmt == "json" else structlog.processors.StackInfoRenderer(),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        # One write per line (print writes the newline apart): a record of another thread, printed by
        # logging with one write of its own, cannot land between a line and its end.
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(numeric)
    handler.addFilter(QuietOutsideJobs(numeric))
    if fmt == "json":
        handler.setFormatter(_json_records(numeric))
    elif numeric > logging.DEBUG:
        handler.setFormatter(DriverErrorsOnOneLine())
    logging.basicConfig(level=min(numeric, logging.INFO), handlers=[handler], force=True)
    log_output_as_events(fmt == "json")


class QuietOutsideJobs(logging.Filter):
    """Below WARNING, only a job's own records pass (the process runs at ``level``): a library's
    INFO is not the operator's business unless they asked for debug."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or self.level <= logging.DEBUG or in_attempt()


def _json_records(level: int) -> logging.Formatter:
    """``logging`` records as the same JSON documents structlog's events are."""
    pre_chain: list[structlog.types.Processor] = [
        job_fields,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if level > logging.DEBUG:
        pre_chain.append(_brief_driver_errors)
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=pre_chain,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, structlog.processors.JSONRenderer()],
    )


def _brief_driver_errors(logger: object, method_name: str, event_dict: MutableMapping[str, Any]) -> Any:
    """The driver's background errors on one line in JSON too (see :class:`DriverErrorsOnOneLine`)."""
    name = str(event_dict.get("logger", ""))
    info = event_dict.get("exc_info")
    if (name == "pymongo" or name.startswith("pymongo.")) and isinstance(info, tuple) and info[1] is not None:
        event_dict["event"] = f"{event_dict.get('event')} {type(info[1]).__name__}: {info[1]}".replace("\n", " ")
        del event_dict["exc_info"]
    return event_dict


class DriverErrorsOnOneLine(logging.Formatter):
    """Prints what the driver logs from its background tasks (``pymongo.*``, for example
    "MongoClient background task encountered an error" when a cursor cannot be killed on a
    server that is gone) on one line, its exception as ``Type: message``: an internal traceback
    is for ``--log-level debug``, where this formatter is not installed. Other records, a job's
    own included, print as the formatter it replaces printed them."""

    def __init__(self, previous: logging.Formatter | None = None) -> None:
        super().__init__()
        self._previous = previous or logging.Formatter(logging.BASIC_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or not (record.name == "pymongo" or record.name.startswith("pymongo.")):
            return self._previous.format(record)
        brief = logging.makeLogRecord(record.__dict__)
        brief.msg = f"{record.getMessage()} {type(exc).__name__}: {exc}".replace("\n", " ")
        brief.args = None
        brief.exc_info = None
        brief.exc_text = None
        brief.stack_info = None
        return self._previous.format(brief)


class Logger(Protocol):
    """What :class:`AfterCommit` needs of a structlog logger: one method per level."""

    def debug(self, event: str, **fields: object) -> object: ...

    def info(self, event: str, **fields: object) -> object: ...

    def warning(self, event: str, **fields: object) -> object: ...


Held = list[tuple[str, str, dict[str, object]] | Event]


class Emitter(Protocol):
    """What :class:`AfterCommit` needs of an event bus (:class:`recruiter.processes.events.Bus`)."""

    def emit(self, event: Event) -> None: ...


class AfterCommit:
    """Log events (and typed events, :meth:`emit`) that a transaction's writes make true, logged only
    once it has committed.

    Inside :meth:`held`, events are kept; when the block ends normally (its
    transaction committed) they are logged, in order; when it raises (the
    transaction aborted, or its commit failed) they are dropped, since nothing
    they say happened. Outside :meth:`held`, events are logged at once: the write
    before them was made on its own, so it has already happened.
    """

    def __init__(self, logger: Logger, bus: Emitter | None = None) -> None:
        self._logger = logger
        self._bus = bus
        self._held: Held | None = None

    def emit(self, event: Event) -> None:
        """Publish ``event`` (:mod:`recruiter.domain.events`) to the bus: after the commit inside :meth:`held`."""
        if self._held is None:
            self._publish(event)
        else:
            self._held.append(event)

    def _publish(self, event: Event) -> None:
        if self._bus is not None:
            self._bus.emit(event)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        if self._held is not None:
            raise RuntimeError("AfterCommit.held is not reentrant")
        held: Held = []
        self._held = held
        try:
            yield
        except BaseException:
            if held:
                self._logger.debug("log.dropped", events=len(held), reason="the transaction did not commit")
            raise
        finally:
            self._held = None
        for item in held:
            if isinstance(item, tuple):
                level, event, fields = item
                getattr(self._logger, level)(event, **fields)
            else:
                self._publish(item)

    def debug(self, event: str, **fields: object) -> None:
        self._log("debug", event, fields)

    def info(self, event: str, **fields: object) -> None:
        self._log("info", event, fields)

    def warning(self, event: str, **fields: object) -> None:
        self._log("warning", event, fields)

    def _log(self, level: str, event: str, fields: dict[str, object]) -> None:
        if self._held is None:
            getattr(self._logger, level)(event, **fields)
        else:
            self._held.append((level, event, fields))
