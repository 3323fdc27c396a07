"""structlog configuration, called only at the CLI edge; and :class:`AfterCommit`,
which holds the log lines and the events (:mod:`recruiter.domain.events`) a
transaction makes true until it has committed."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import Protocol

import structlog

from recruiter.domain.events import Event

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("auto", "console", "json")


def configure(level: str = "info", fmt: str = "auto") -> None:
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
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info if fmt == "json" else structlog.processors.StackInfoRenderer(),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=max(numeric, logging.WARNING), stream=sys.stderr)
    if numeric > logging.DEBUG:
        for handler in logging.getLogger().handlers:
            if type(handler.formatter) is logging.Formatter or handler.formatter is None:
                handler.setFormatter(DriverErrorsOnOneLine(handler.formatter))


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
