"""What a job logs during an attempt, kept for its execution: :class:`LogBuffer` and :func:`capturing`.

Three sources are captured, once :func:`install` has run in the process:

- stdlib ``logging``: a handler on the root logger (INFO and above; the root
  logger is lowered to INFO for that, and the handlers it had keep the level
  they showed before, so the process's own output does not change);
- structlog: a processor put first in the configured chain (in place, so
  loggers already cached see it too; :func:`ensure_installed` puts it back if
  the configuration was replaced), whatever the rest of the chain renders;
- ``print`` and other writes to ``sys.stdout`` / ``sys.stderr``: the streams
  are wrapped by a :class:`TeeStream` that passes every write through.

Which attempt a line belongs to is a context variable: the executor sets it in
the attempt's own task (``asyncio.to_thread`` and the tasks a job starts copy
it), so the slots of one process, running side by side, each keep only their
own lines; the worker's own log calls, made outside those contexts, are never
captured. A job's lines still reach the process's output as before; a copy is
kept. A timeout job's child process captures the same way and sends its lines
to the parent (:mod:`recruiter.processes.worker.child`).

Invariant: a buffer never holds more than ``MAX_LOG_BYTES`` (UTF-8) of lines;
what it dropped, oldest first, is counted in bytes in ``cut``. Capturing never
raises into the job: a line that cannot be formatted is kept as its repr, and a
lone surrogate is kept as its escape (``\ud800``: recruiter.domain.handback).
Capturing costs time linear in what is written, with or without newlines: text
written without a newline is kept as chunks (its newest ``MAX_LOG_BYTES`` only),
joined once when the line ends, and the lines of one write that the buffer would
drop at once are counted without being formatted.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from types import FrameType
from typing import Any, TextIO

import structlog

from recruiter.domain.attempt import MAX_LOG_BYTES
from recruiter.domain.handback import storable_text

# The buffer of the attempt running in the current context, if any.
CURRENT: contextvars.ContextVar[LogBuffer | None] = contextvars.ContextVar("recruiter_job_logs", default=None)
CAPTURE_LEVEL = logging.INFO
# The event a printed line of a job becomes when the process logs JSON (recruiter.processes.worker.output).
OUTPUT_EVENT = "job.output"
# Writes to stdout/stderr whose caller is in one of these modules (or this one: _LastResort)
# are lines a logger already captured (a structlog PrintLogger, a logging StreamHandler): not
# captured twice.
_LOGGER_MODULES = ("logging", "structlog")


_second: tuple[int, str] = (-1, "")  # the last second formatted (replaced whole: no lock needed)


def _stamp(at: float) -> str:
    global _second
    whole = int(at)
    second, text = _second
    if second != whole:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
        _second = (whole, text)
    return f"{text}.{int(at * 1000) % 1000:03d}Z"


def format_line(at: float, level: str, name: str | None, message: str) -> str:
    """``2026-11-23T02:45:01.123Z INFO    app.copy: copied 4 files``, ending with a newline."""
    source = f"{name}: " if name else ""
    return f"{_stamp(at)} {level.upper():<7} {source}{message}\n"


class LogBuffer:
    """The newest ``max_bytes`` of an attempt's lines (thread-safe); older lines are dropped whole,
    and a single line longer than the bound keeps its tail (cut on a character boundary)."""

    def __init__(self, max_bytes: int = MAX_LOG_BYTES) -> None:
        self.max_bytes = max_bytes
        # The attempt's job_id and attempt, added to what the process logs in its context (job_fields).
        self.fields: dict[str, object] = {}
        # Where each completed printed line also goes when the process logs JSON (output.py), instead
        # of the raw stream: (stream, line without its newline). None: printed text passes through.
        self.echo: Callable[[str, str], None] | None = None
        self.cut = 0  # bytes dropped
        self._lines: deque[tuple[str, int]] = deque()
        self._size = 0
        self._lock = threading.Lock()
        # stream name -> the chunks written without their newline yet, and their length in characters
        self._partial: dict[str, tuple[list[str], int]] = {}

    def add(self, line: str) -> None:
        line = storable_text(line)
        size = len(line) if line.isascii() else len(line.encode("utf-8"))
        with self._lock:
            self._append(line, size)

    def _append(self, line: str, size: int) -> None:
        self._lines.append((line, size))
        self._size += size
        while self._size > self.max_bytes:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        if len(self._lines) > 1:
            _, size = self._lines.popleft()
            self._size -= size
            self.cut += size
            return
        line, size = self._lines.pop()  # one line over the bound: keep its tail
        tail = line.encode("utf-8", "replace")[-self.max_bytes:].decode("utf-8", "ignore")
        kept = len(tail.encode("utf-8"))
        self._lines.append((tail, kept))
        self._size = kept
        self.cut += size - kept

    def extend(self, lines: Iterable[str], cut: int = 0) -> None:
        """Add lines captured elsewhere (a child process), and the bytes it dropped before them."""
        with self._lock:
            self.cut += cut
        for line in lines:
            if self.echo is not None:  # the child wrote nothing itself: its lines are logged here
                self.echo("child", line.rstrip("\n"))
            self.add(line)

    def write(self, stream: str, text: str) -> None:
        """Text written to ``stream`` (``stdout``/``stderr``): each completed line becomes one line."""
        with self._lock:
            chunks, chars = self._partial.pop(stream, ([], 0))
            if "\n" not in text:
                chunks.append(text)
                self._partial[stream] = self._trimmed(chunks, chars + len(text))
                return
            first, *done = text.split("\n")
            rest = done.pop()
            if rest:
                self._partial[stream] = ([rest], len(rest))
            chunks.append(first)
            self._add_lines(stream, ["".join(chunks), *done])

    def _trimmed(self, chunks: list[str], chars: int) -> tuple[list[str], int]:
        """A line's pending chunks, cut to its newest ``max_bytes`` characters (all a line keeps:
        a character is at least one byte) once they reach twice that: amortised linear."""
        if chars <= 2 * self.max_bytes:
            return chunks, chars
        joined = "".join(chunks)
        self.cut += _utf8_size(joined[:-self.max_bytes])
        kept = joined[-self.max_bytes:]
        return [kept], len(kept)

    def _add_lines(self, stream: str, lines: list[str]) -> None:
        """Format and keep ``lines`` (under the lock); those the buffer would drop at once, being
        older than the newest ``max_bytes``, are only counted in ``cut``."""
        if self.echo is not None:
            for line in lines:
                self.echo(stream, line)
        prefix = format_line(time.time(), "print", stream, "")  # the line's stamp, and its newline
        budget, first = self.max_bytes, len(lines)
        while first > 0 and budget > 0:
            first -= 1
            budget -= len(lines[first]) + len(prefix)  # characters: no more than the bytes
        if first > 0:
            dropped = lines[:first]
            self.cut += _utf8_size("\n".join(dropped)) + 1 + len(dropped) * _utf8_size(prefix) - len(dropped)
        stamp = prefix[:-1]
        for line in lines[first:]:
            text = storable_text(stamp + line + "\n")
            self._append(text, len(text) if text.isascii() else len(text.encode("utf-8")))

    def finish(self) -> None:
        """End the lines written without a final newline."""
        with self._lock:
            partial, self._partial = self._partial, {}
            for stream, (chunks, _) in partial.items():
                self._add_lines(stream, ["".join(chunks)])

    def has_lines(self) -> bool:
        with self._lock:
            return bool(self._lines)

    def drain(self) -> tuple[list[str], int]:
        """The lines and the cut count so far, emptying the buffer (a child sends them on)."""
        with self._lock:
            lines, cut = [line for line, _ in self._lines], self.cut
            self._lines.clear()
            self._size, self.cut = 0, 0
        return lines, cut

    def text(self) -> tuple[str, int]:
        """What the execution stores: ``(logs, logs_cut)``."""
        self.finish()
        with self._lock:
            return "".join(line for line, _ in self._lines), self.cut


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "backslashreplace"))


def _from_logger(frame: Any) -> bool:
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    return isinstance(name, str) and (name == __name__ or name.split(".")[0] in _LOGGER_MODULES)


class TeeStream:
    """``sys.stdout`` or ``sys.stderr``: every write goes to the wrapped stream, and is also
    kept in the current attempt's buffer, if there is one."""

    def __init__(self, wrapped: TextIO, name: str) -> None:
        self.wrapped = wrapped
        self.stream_name = name

    def write(self, text: str) -> int:
        buffer = CURRENT.get()
        if buffer is not None and isinstance(text, str):
            if not _from_logger(sys._getframe(1)):
                buffer.write(self.stream_name, text)
            if buffer.echo is not None:  # its lines and records are logged as events: nothing raw
                return len(text)
        try:
            return self.wrapped.write(text)
        except UnicodeEncodeError:  # a lone surrogate, on a stream that refuses it: written escaped
            self.wrapped.write(storable_text(text) if isinstance(text, str) else text)
            return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


class CaptureHandler(logging.Handler):
    """Keeps the records logged in an attempt's context (not those structlog sends through
    logging: its processor has them already)."""

    def emit(self, record: logging.LogRecord) -> None:
        buffer = CURRENT.get()
        if buffer is None or _via_structlog():
            return
        try:
            message = record.getMessage()
            if record.exc_info:
                message += "\n" + logging.Formatter().formatException(record.exc_info)
        except Exception:  # noqa: BLE001 - a bad format string must not fail the job
            message = repr(record.msg)
        buffer.add(format_line(record.created, record.levelname, record.name, message))


def _via_structlog() -> bool:
    frame: FrameType | None = sys._getframe(2)
    for _ in range(12):
        if frame is None:
            return False
        if str(frame.f_globals.get("__name__", "")).startswith("structlog"):
            return True
        frame = frame.f_back
    return False


_LEVELS = {"debug": 10, "info": 20, "msg": 20, "warning": 30, "warn": 30, "error": 40, "exception": 40,
           "critical": 50, "fatal": 50}


def in_attempt() -> bool:
    """Whether the caller runs in an attempt's context (its lines are being kept)."""
    return CURRENT.get() is not None


def job_fields(logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> Any:
    """A structlog processor: what is logged in an attempt's context carries its job id and attempt."""
    buffer = CURRENT.get()
    if buffer is not None:
        for key, value in buffer.fields.items():
            event_dict.setdefault(key, value)
    return event_dict


def capture_processor(logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> Any:
    """The structlog processor put first in the chain: keeps the event if an attempt runs here
    (not a printed line logged as an event: the buffer has that line already)."""
    buffer = CURRENT.get()
    if (buffer is not None and _LEVELS.get(method_name, 20) >= CAPTURE_LEVEL
            and event_dict.get("event") != OUTPUT_EVENT):
        try:
            buffer.add(_structlog_line(logger, method_name, event_dict))
        except Exception:  # noqa: BLE001 - capturing never fails the job
            buffer.add(format_line(time.time(), method_name, None, repr(dict(event_dict))))
    return event_dict


def _structlog_line(logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> str:
    fields = dict(event_dict)
    event = fields.pop("event", "")
    name = fields.pop("logger", None) or getattr(logger, "name", None)
    exc_info = fields.pop("exc_info", None)
    message = " ".join([str(event), *(f"{k}={v!r}" for k, v in fields.items())])
    if exc_info:
        if exc_info is True:
            exc_info = sys.exc_info()
        elif isinstance(exc_info, BaseException):
            exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
        if isinstance(exc_info, tuple) and exc_info[0] is not None:
            message += "\n" + logging.Formatter().formatException(exc_info)
    level = "error" if method_name == "exception" else method_name
    return format_line(time.time(), level, str(name) if name else None, message)


_handler = CaptureHandler(CAPTURE_LEVEL)
_install_lock = threading.Lock()


def ensure_installed() -> None:
    """Install the capture, or put back what a reconfiguration removed (cheap when all is in place)."""
    with _install_lock:
        _ensure_logging()
        _ensure_structlog()
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if not isinstance(stream, TeeStream):
                setattr(sys, name, TeeStream(stream, name))


install = ensure_installed


def _ensure_logging() -> None:
    root = logging.getLogger()
    if _handler in root.handlers:
        return
    if not root.handlers:  # warnings went to logging.lastResort, which a handler turns off: keep them
        root.addHandler(_LastResort(max(root.level, logging.WARNING)))
    elif root.level > CAPTURE_LEVEL:
        for h in root.handlers:  # they keep showing what they showed
            h.setLevel(max(h.level, root.level))
    if root.level > CAPTURE_LEVEL:
        root.setLevel(CAPTURE_LEVEL)
    root.addHandler(_handler)


class _LastResort(logging.Handler):
    """What logging does with no handler (records at ``level`` and above, to the current
    ``sys.stderr``), made explicit: once the capture handler is there, logging no longer
    falls back on ``logging.lastResort``."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 - as logging does: a record that fails to print is reported
            self.handleError(record)


def _ensure_structlog() -> None:
    processors = structlog.get_config()["processors"]
    if any(p is capture_processor for p in processors):
        return
    if isinstance(processors, list):
        processors.insert(0, capture_processor)  # in place: loggers already bound share this list
    else:
        structlog.configure(processors=[capture_processor, *processors])


@contextlib.contextmanager
def capturing(buffer: LogBuffer) -> Iterator[LogBuffer]:
    """Keep what the current context logs in ``buffer`` until the block ends."""
    token = CURRENT.set(buffer)
    try:
        yield buffer
    finally:
        CURRENT.reset(token)
