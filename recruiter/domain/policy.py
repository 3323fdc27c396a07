"""What a retry policy is: the failed attempt it judges, the decision it returns, how it is stored.

:class:`RetryPolicy` is the base class of every policy, the built-in ones
(:mod:`recruiter.domain.retry`, imported by users as ``recruiter.retry``) and
the users' own. A policy is a pure function of a :class:`Failure` and an
explicit ``now``, returning a :data:`Decision`; nothing here does I/O or reads
the clock.

Invariant: a dataclass policy round-trips through its document,
``policy_from_document(policy_to_document(p)) == p``: the fields are stored as
BSON-friendly values (durations as float seconds, nested policies as their own
documents) and read back by their type hints.
"""

from __future__ import annotations

import abc
import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Union

from recruiter.domain.naming import import_qualified, qualified_name


@dataclass(frozen=True)
class Failure:
    """A failed attempt, as seen by a retry policy."""

    job_id: str
    attempts: int
    """Executions so far, including the one that just failed (>= 1)."""
    created_at: datetime
    scheduled_at: datetime
    ended_at: datetime
    exception_types: tuple[str, ...]
    """``exception_lineage()`` of the error, most specific first."""
    message: str
    crashed: bool = False
    group: str | None = None
    """The group the job was in when the attempt failed."""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {self.attempts}")


@dataclass(frozen=True)
class RetryAt:
    """Run the job again at ``at``."""

    at: datetime


@dataclass(frozen=True)
class Archive:
    """Stop: archive the job with reason ``why`` (and, optionally, a one-line ``reason`` saying more)."""

    why: str
    reason: str | None = None


@dataclass(frozen=True)
class MoveToGroup:
    """Run the job again at ``at``, in ``group``."""

    group: str
    at: datetime


Decision = RetryAt | Archive | MoveToGroup


# -- (de)serialisation ---------------------------------------------------------


def _encode(value: object, where: str) -> object:
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, RetryPolicy):
        return value.to_document()
    if isinstance(value, (tuple, list)):
        return [_encode(item, where) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _encode(item, where) for key, item in value.items()}
    raise TypeError(f"{where}: cannot store a {type(value).__name__} in a policy document")


def _looks_like_policy(value: object) -> bool:
    return isinstance(value, dict) and set(value) == {"class", "parameters"}


def _decode_untyped(value: object) -> object:
    if _looks_like_policy(value):
        return policy_from_document(value)
    if isinstance(value, dict):
        return {key: _decode_untyped(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_decode_untyped(item) for item in value]
    return value


def _decode(value: object, hint: object) -> object:
    """Turn a stored parameter back into the field's type, guided by its hint."""
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is timedelta:
        return timedelta(seconds=value) if isinstance(value, (int, float)) else value
    if origin in (Union, types.UnionType):
        return _decode_union(value, args)
    if isinstance(hint, type) and issubclass(hint, RetryPolicy):
        return policy_from_document(value)
    if origin in (tuple, list) and isinstance(value, list):
        return _decode_sequence(value, origin, args)
    if origin in (dict, Mapping) and isinstance(value, dict):
        item_hint = args[1] if len(args) == 2 else object
        return {key: _decode(item, item_hint) for key, item in value.items()}
    return _decode_untyped(value)


def _decode_union(value: object, args: tuple[object, ...]) -> object:
    """A parameter whose hint is a union (``timedelta | None``, ``RetryPolicy | None``)."""
    options = [arg for arg in args if arg is not type(None)]
    if timedelta in options and isinstance(value, (int, float)):
        return timedelta(seconds=value)
    if len(options) == 1:
        return _decode(value, options[0])
    return _decode_untyped(value)


def _decode_sequence(value: list[object], origin: object, args: tuple[object, ...]) -> object:
    """A stored array, back into the ``list[...]`` or ``tuple[...]`` its hint names."""
    if origin is list:
        item_hint = args[0] if args else object
        return [_decode(item, item_hint) for item in value]
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_decode(item, args[0]) for item in value)
    if len(args) == len(value):
        return tuple(_decode(item, arg) for item, arg in zip(value, args, strict=True))
    return tuple(_decode_untyped(item) for item in value)


class RetryPolicy(abc.ABC):
    """Decides what happens to a job after a failed attempt.

    Subclasses are frozen dataclasses defined at module level; the default
    :meth:`to_document` and :meth:`from_parameters` work from their fields.
    Override both for a policy that is not a dataclass.
    """

    @abc.abstractmethod
    def decide(self, failure: Failure, now: datetime) -> Decision:
        """The decision for ``failure``, taken at ``now`` (aware UTC)."""

    def to_document(self) -> dict[str, object]:
        """``{"class": "module:Qualname", "parameters": {...}}``, BSON-friendly."""
        cls = type(self)
        if not dataclasses.is_dataclass(self):
            raise TypeError(
                f"{cls.__qualname__} is not a dataclass; "
                "override to_document() and from_parameters()"
            )
        where = qualified_name(cls)
        parameters = {
            f.name: _encode(getattr(self, f.name), f"{where}.{f.name}")
            for f in dataclasses.fields(self)
            if f.init
        }
        return {"class": where, "parameters": parameters}

    @classmethod
    def from_parameters(cls, parameters: dict[str, object]) -> RetryPolicy:
        """Rebuild a policy from the ``parameters`` of its document."""
        if not dataclasses.is_dataclass(cls):
            raise TypeError(
                f"{cls.__qualname__} is not a dataclass; "
                "override to_document() and from_parameters()"
            )
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        unknown = sorted(set(parameters) - set(fields))
        if unknown:
            raise ValueError(f"unknown parameters for {cls.__qualname__}: {', '.join(unknown)}")
        try:
            hints = typing.get_type_hints(cls)
        except (NameError, TypeError):
            hints = {}
        kwargs = {name: _decode(value, hints.get(name, object)) for name, value in parameters.items()}
        return cls(**kwargs)


def policy_to_document(policy: RetryPolicy) -> dict[str, object]:
    """The ``{class, parameters}`` document of ``policy``."""
    if not isinstance(policy, RetryPolicy):
        raise TypeError(f"expected a RetryPolicy, got {policy!r}")
    return policy.to_document()


def policy_from_document(doc: object) -> RetryPolicy:
    """Rebuild a policy from its ``{class, parameters}`` document.

    Raises :class:`~recruiter.domain.naming.UnknownClass` if the class cannot be
    imported, and ``ValueError`` if the document or its parameters are invalid.
    """
    if not isinstance(doc, Mapping) or not isinstance(doc.get("class"), str):
        raise ValueError(f"a retry policy document needs a 'class' string, got {doc!r}")
    name = doc["class"]
    parameters = doc.get("parameters", {})
    if not isinstance(parameters, Mapping):
        raise ValueError(f"parameters of retry policy {name} must be a mapping, got {parameters!r}")
    cls = import_qualified(name)
    if not (isinstance(cls, type) and issubclass(cls, RetryPolicy)):
        raise ValueError(f"{name} is not a RetryPolicy subclass")
    try:
        return cls.from_parameters(dict(parameters))
    except TypeError as exc:
        raise ValueError(f"invalid parameters for retry policy {name}: {exc}") from exc
