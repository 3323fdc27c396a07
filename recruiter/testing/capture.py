"""The worker's log capture, for the length of a block only.

:mod:`recruiter.processes.worker.capture` installs itself for good in a worker
process: a handler on the root logger (which it lowers to INFO), a processor
first in structlog's chain, and ``sys.stdout``/``sys.stderr`` wrapped. A user's
test process must not keep any of that, so :func:`installed_for_now` installs it
and then puts back exactly what was there before: the root logger's handlers and
their levels, its level, the two streams and structlog's processors.

Invariant: after the block, logging, structlog and the standard streams are as
they were before it (nothing else is changed; a reconfiguration made inside the
block by the code under test is kept, less the capture's own pieces).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

import structlog

from recruiter.processes.worker import capture


@contextlib.contextmanager
def installed_for_now() -> Iterator[None]:
    """Capture as a worker does inside the block; undo it all after."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    handler_levels = {h: h.level for h in handlers}
    streams = sys.stdout, sys.stderr
    had_processor = any(p is capture.capture_processor for p in structlog.get_config()["processors"])
    capture.ensure_installed()
    try:
        yield
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        for handler, handler_level in handler_levels.items():
            handler.setLevel(handler_level)
        root.setLevel(level)
        if isinstance(sys.stdout, capture.TeeStream) and sys.stdout is not streams[0]:
            sys.stdout = streams[0]
        if isinstance(sys.stderr, capture.TeeStream) and sys.stderr is not streams[1]:
            sys.stderr = streams[1]
        if not had_processor:
            _remove_processor()


def _remove_processor() -> None:
    processors = structlog.get_config()["processors"]
    if not any(p is capture.capture_processor for p in processors):
        return
    if isinstance(processors, list):
        processors[:] = [p for p in processors if p is not capture.capture_processor]  # in place, as it was added
    else:
        structlog.configure(processors=[p for p in processors if p is not capture.capture_processor])
