"""Names of Python objects as stored in MongoDB: ``"module:Qualname"``.

Workables, retry policies and exception classes are all stored by name so that
the documents stay readable in ``mongosh`` and any process with the code on its
path can turn them back into objects.
"""

from __future__ import annotations

import importlib
from typing import Any


class UnknownClass(LookupError):
    """A stored ``module:Qualname`` does not name an importable object."""


def qualified_name(obj: type | Any) -> str:
    """``module:Qualname`` of a class (or of the class of an instance)."""
    cls = obj if isinstance(obj, type) else type(obj)
    if "<locals>" in cls.__qualname__:
        raise TypeError(
            f"{cls.__qualname__} is defined inside a function; "
            "define it at module level so other processes can import it"
        )
    return f"{cls.__module__}:{cls.__qualname__}"


def import_qualified(name: str) -> Any:
    """Import the object named ``module:Qualname`` (``module.Name`` is accepted too)."""
    if ":" in name:
        module_name, _, qualname = name.partition(":")
    else:
        module_name, _, qualname = name.rpartition(".")
    if not module_name or not qualname:
        raise UnknownClass(f"{name!r} is not of the form 'module:Qualname'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UnknownClass(f"cannot import module {module_name!r} for {name!r}: {exc}") from exc
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UnknownClass(f"module {module_name!r} has no attribute {qualname!r}") from None
    return obj


def exception_lineage(exc_type: type[BaseException]) -> tuple[str, ...]:
    """Qualified names of an exception class and its bases, most specific first."""
    return tuple(
        f"{c.__module__}:{c.__qualname__}" for c in exc_type.__mro__ if issubclass(c, BaseException)
    )
