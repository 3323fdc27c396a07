"""Deadlines carried into every server call: a stalled server never holds a caller past its time.

A wait checks its deadline between server calls; a call itself (a read, a getMore of a
change stream, a server selection, a connection checkout) is bounded by PyMongo's
client-side operation timeout, set with :func:`within` for the time left. When it
expires, PyMongo raises an error whose ``timeout`` is true (:func:`is_timeout`), which
the caller turns into its own :class:`TimeoutError`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pymongo
from pymongo.errors import PyMongoError

# PyMongo refuses a timeout of 0 (it means "no timeout" there): the least time a call gets.
LEAST_S = 0.001


@contextlib.contextmanager
def within(seconds: float | None) -> Iterator[None]:
    """Server calls made in this block end within ``seconds`` (None: no deadline)."""
    if seconds is None:
        yield
        return
    with pymongo.timeout(max(seconds, LEAST_S)):
        yield


def is_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` is a server call that ran out of its time (``within``, or a driver timeout)."""
    return isinstance(exc, PyMongoError) and bool(getattr(exc, "timeout", False))
