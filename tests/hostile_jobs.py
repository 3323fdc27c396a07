"""Jobs that hand their worker hostile values; workers import them as ``tests.hostile_jobs``.

:class:`Hostile` runs in a thread (or, given a timeout, in a child process) and
:class:`HostileAsync` on the worker's event loop; ``what`` names one behaviour of
:data:`BEHAVIOURS`. :data:`EXPECTED` says how each ends in ``archived``: ``done`` with
``result_dropped``, ``done`` with its text kept (escaped), or failed with the class the
worker recorded. ``KILLERS`` end their process outright (``os._exit``, a segfault).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from recruiter import JobContext, Workable

MB = 1024 * 1024


class StrRaises(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


class StrNotString(Exception):
    def __str__(self) -> Any:
        return 42


class NothingWorks(Exception):
    """``__str__`` and ``__repr__`` raise, and ``__module__`` is not even a string."""

    __module__: Any = ("not", ["a", "module"])  # unhashable: not usable as a name

    def __str__(self) -> str:
        raise ValueError("str")

    def __repr__(self) -> str:
        raise ValueError("repr")


class Custom:
    pass


def _self_referencing() -> object:
    d: dict[str, object] = {}
    d["me"] = d
    return d


def _nested(levels: int) -> object:
    value: object = "bottom"
    for _ in range(levels):
        value = {"a": value}
    return value


def _write(total: int, piece: str) -> str:
    for _ in range(total // len(piece)):
        sys.stdout.write(piece)
    sys.stdout.flush()
    return "written"


def _progress(ctx: JobContext) -> str:
    ctx.progress(0.5, "half \ud800 way")
    return "progressed"


def _logs(ctx: JobContext) -> str:
    print("a print \ud800 line")
    logging.getLogger("hostile").warning("a logging \udfff line")
    return "logged"


def _cr_progress(ctx: JobContext) -> str:
    for i in range(2 * MB // 64):
        sys.stdout.write(f"\r[{'#' * (i % 50):<50}] {i:>10}")
    return "progress bar"


def _raise(exc: BaseException) -> Callable[[JobContext], object]:
    def raising(ctx: JobContext) -> object:
        raise exc
    return raising


def _returning(make: Callable[[], object]) -> Callable[[JobContext], object]:
    return lambda ctx: make()


def _segfault(ctx: JobContext) -> object:
    return ctypes.string_at(0)


def _exit_now(ctx: JobContext) -> object:
    os._exit(3)


BEHAVIOURS: dict[str, Callable[[JobContext], object]] = {
    # results BSON cannot hold, or MongoDB refuses in an update
    "set": _returning(lambda: {1, 2}),
    "object": _returning(Custom),
    "int-keys": _returning(lambda: {1: "one"}),
    "dollar-key": _returning(lambda: {"$where": "1"}),
    "dotted-key": _returning(lambda: {"a.b": 1}),
    "self-referencing": _returning(_self_referencing),
    "too-deep": _returning(lambda: _nested(120)),
    "recursion-deep": _returning(lambda: _nested(5000)),
    "surrogate-result": _returning(lambda: "lone \ud800"),
    "over-the-limit": _returning(lambda: "x" * (2 * MB)),
    "huge-int": _returning(lambda: 2**80),
    # text with lone surrogates: kept, escaped
    "surrogate-message": _raise(ValueError("bad \ud800 value")),
    "surrogate-progress": _progress,
    "surrogate-logs": _logs,
    # exceptions that misbehave
    "str-raises": _raise(StrRaises()),
    "str-not-a-string": _raise(StrNotString()),
    "nothing-works": _raise(NothingWorks()),
    # BaseExceptions
    "sys-exit": _raise(SystemExit(42)),
    "keyboard-interrupt": _raise(KeyboardInterrupt()),
    "base-exception": _raise(BaseException("a bare BaseException")),
    "cancelled": _raise(asyncio.CancelledError()),
    # output
    "200mb-lines": lambda ctx: _write(200 * MB, "l" * (MB - 1) + "\n"),
    "200mb-no-newline": lambda ctx: _write(200 * MB, "n" * MB),
    "cr-progress": _cr_progress,
    # end their process outright
    "os-exit": _exit_now,
    "segfault": _segfault,
}
KILLERS = ("os-exit", "segfault")

# How each ends: ("dropped", reason part) done with result_dropped; ("kept", field) done with
# the text kept; ("failed", class) archived by the retry policy with that error class.
EXPECTED: dict[str, tuple[str, str]] = {
    "set": ("dropped", "cannot encode object"),
    "object": ("dropped", "cannot encode object"),
    "int-keys": ("dropped", "a key is not a string"),
    "dollar-key": ("dropped", "MongoDB refuses in an update"),
    "dotted-key": ("dropped", "MongoDB refuses in an update"),
    "self-referencing": ("dropped", "refers to itself"),
    "too-deep": ("dropped", "nests deeper than"),
    "recursion-deep": ("dropped", "nests deeper than"),
    "surrogate-result": ("dropped", "lone surrogate"),
    "over-the-limit": ("dropped", "over the"),
    "huge-int": ("dropped", "8-byte ints"),
    "surrogate-message": ("failed", "builtins:ValueError"),
    "surrogate-progress": ("kept", "progressed"),
    "surrogate-logs": ("kept", "logged"),
    "str-raises": ("failed", "tests.hostile_jobs:StrRaises"),
    "str-not-a-string": ("failed", "tests.hostile_jobs:StrNotString"),
    "nothing-works": ("failed", "builtins:Exception"),
    "sys-exit": ("failed", "builtins:SystemExit"),
    "keyboard-interrupt": ("failed", "builtins:KeyboardInterrupt"),
    "base-exception": ("failed", "builtins:BaseException"),
    "cancelled": ("failed", "asyncio.exceptions:CancelledError"),
    "200mb-lines": ("kept", "written"),
    "200mb-no-newline": ("kept", "written"),
    "cr-progress": ("kept", "progress bar"),
}


class Hostile(Workable):
    """Does ``what`` (a key of :data:`BEHAVIOURS`) in a thread, or in a child process when
    enqueued with a timeout."""

    def __init__(self, what: str) -> None:
        self.what = what

    def execute(self, ctx: JobContext) -> object:
        return BEHAVIOURS[self.what](ctx)


class HostileAsync(Workable):
    """Does ``what`` on the worker's event loop."""

    def __init__(self, what: str) -> None:
        self.what = what

    async def execute(self, ctx: JobContext) -> object:
        await asyncio.sleep(0)
        return BEHAVIOURS[self.what](ctx)


class ReturnsText(Workable):
    """Returns ``size`` characters of text."""

    def __init__(self, size: int) -> None:
        self.size = size

    def execute(self) -> str:
        return "r" * self.size
