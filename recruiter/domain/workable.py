"""The unit of work users write: a :class:`Workable`.

A workable is stored as ``{class: "module:Qualname", parameters: {...}, method}``.
By default the parameters are the arguments its constructor was called with, so
this is all a user writes::

    class SendInvoice(Workable):
        def __init__(self, invoice_id: str) -> None:
            self.invoice_id = invoice_id

        def execute(self, ctx: JobContext) -> None:
            ...

A worker rebuilds it with ``SendInvoice(**parameters)`` and calls ``execute``
(plain or ``async def``, with or without the ``ctx`` argument). Classes that need
another representation override :meth:`Workable.export_parameters` and
:meth:`Workable.from_parameters`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, ClassVar, TypeVar, cast

import bson

from recruiter.domain.dependency_results import DependencyResults
from recruiter.domain.handback import storable_text
from recruiter.domain.naming import import_qualified, qualified_name
from recruiter.domain.records import Raw, WorkableDocument
from recruiter.domain.retry import RetryPolicy

R = TypeVar("R")

if TYPE_CHECKING:
    from recruiter.domain.adding import WorkflowSteps
    from recruiter.domain.builder import Enqueuer, JobBuilder


def _no_steps() -> WorkflowSteps:
    """A context's ``workflow`` when none is given: a job that is no workflow's step (the import
    is here: the steps are built as jobs, whose module imports this one)."""
    from recruiter.domain.adding import WorkflowSteps

    return WorkflowSteps()


# A progress message is cut to this many characters (it rides on every heartbeat).
MAX_PROGRESS_MESSAGE_CHARS = 500

# Where ``JobContext.progress`` delivers a checked value: the worker's in-memory cell
# (no write: the heartbeat carries the newest value).
ProgressSink = Callable[[float | None, str | None], None]


def checked_progress(value: object = None, message: object = None) -> tuple[float | None, str | None]:
    """``(value, message)`` as stored, or ValueError with one line: a fraction from 0 to 1 and/or a
    string (cut to ``MAX_PROGRESS_MESSAGE_CHARS``); at least one of them."""
    if value is None and message is None:
        raise ValueError("ctx.progress needs a value (0 to 1) or a message")
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ValueError(f"progress value must be a number from 0 to 1, got {type(value).__name__}")
        value = float(value)
        if not math.isfinite(value) or not 0.0 <= value <= 1.0:
            raise ValueError(f"progress value must be from 0 to 1, got {value!r}")
    if message is not None and not isinstance(message, str):
        raise ValueError(f"progress message must be a string, got {type(message).__name__}")
    # A plain str, lone surrogates escaped: the heartbeat write must not fail on it (domain.handback).
    return value, None if message is None else storable_text(message)[:MAX_PROGRESS_MESSAGE_CHARS]


@dataclass(frozen=True)
class JobContext:
    """What a running job may know about itself, and how it reports its progress.

    ``reporter`` is set by the worker; it is not pickled (a job run in a child
    process gets the child's own), and a context built without one (in a user's
    test) checks ``progress`` calls and keeps nothing.
    """

    job_id: str
    attempt: int
    worker_id: str
    group: str
    tags: tuple[str, ...] = ()
    tenant: str | None = None
    scheduled_at: datetime | None = None
    assigned_at: datetime | None = None  # when the recruiter assigned this attempt
    extra: dict[str, object] = field(default_factory=dict)
    after: tuple[str, ...] = ()  # .after(...): the ids of the jobs it waited for (recruiter.domain.dependencies)
    reporter: ProgressSink | None = field(default=None, compare=False, repr=False)
    dependencies: DependencyResults | None = field(default=None, compare=False, repr=False)
    # ctx.workflow.add(...): the steps a workflow's step adds to it (recruiter.domain.adding)
    workflow: WorkflowSteps = field(default_factory=_no_steps, compare=False, repr=False)

    def dependency_results(self) -> DependencyResults:
        """The results of the jobs it waited for, by id and by step name (read by the worker as the
        attempt starts; empty for a job that waited for none): see :mod:`recruiter.domain.dependency_results`."""
        return self.dependencies if self.dependencies is not None else DependencyResults()

    def progress(self, value: float | None = None, message: str | None = None) -> None:
        """Say how far the job is: ``ctx.progress(0.4, "copied 4 of 10 files")``; either part may
        be left out. Costs no write: the worker's heartbeat carries the newest value (within
        one heartbeat interval). Raises ValueError on a value outside 0..1 or a non-string message."""
        checked = checked_progress(value, message)
        if self.reporter is not None:
            self.reporter(*checked)

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["reporter"] = None  # the worker's sink stays in the worker
        return state


_PARAMETERS_ATTR = "_recruiter_parameters"


def _capture_init(init: Callable[..., None]) -> Callable[..., None]:
    signature = inspect.signature(init)
    for param in signature.parameters.values():
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            raise TypeError(
                f"{init.__qualname__} takes *{param.name}; a Workable constructor needs named "
                "parameters (or override export_parameters/from_parameters)"
            )

    @functools.wraps(init)
    def wrapper(self: object, *args: object, **kwargs: object) -> None:
        if not hasattr(self, _PARAMETERS_ATTR):
            bound = signature.bind(self, *args, **kwargs)
            params: dict[str, object] = {}
            for name, value in list(bound.arguments.items())[1:]:
                if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
                    params.update(value)
                else:
                    params[name] = value
            object.__setattr__(self, _PARAMETERS_ATTR, params)
        init(self, *args, **kwargs)

    return wrapper


class Workable:
    """Base class of everything that can be enqueued.

    Subclasses implement ``execute(self, ctx)`` (or ``async def execute``). The
    optional class attributes ``group``, ``retry_policy`` and ``timeout_s`` give
    defaults for every job of the class; ``unique_key()`` (with ``unique_scope`` and
    ``unique_on_conflict``) gives its jobs a unique key (:mod:`recruiter.domain.unique`);
    ``at_most_once = True`` makes every job of the class one that is never run again
    after its worker died during an attempt; ``max_snoozes`` caps how many times each of
    its jobs may snooze (return ``Snooze(...)``, :mod:`recruiter.domain.snooze`).
    """

    method: ClassVar[str] = "execute"
    group: ClassVar[str | None] = None
    retry_policy: ClassVar[RetryPolicy | None] = None
    at_most_once: ClassVar[bool] = False
    max_snoozes: ClassVar[int | None] = None  # None: recruiter.domain.snooze.DEFAULT_MAX_SNOOZES
    # The scope and conflict behaviour of the key unique_key() gives (recruiter.domain.unique).
    unique_scope: ClassVar[str | timedelta] = "unfinished"
    unique_on_conflict: ClassVar[str] = "existing"

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = _capture_init(cls.__dict__["__init__"])  # type: ignore[method-assign]

    def unique_key(self) -> str | None:
        """The unique key of this job when the builder gives none (``.unique(...)``); None (the
        default): no key. Override to derive one from the parameters, e.g. ``f"invoice-{self.id}"``."""
        return None

    def export_parameters(self) -> dict[str, object]:
        """The parameters stored with the job; by default the constructor arguments (for a
        dataclass or an attrs class: its fields that its ``__init__`` takes)."""
        captured = getattr(self, _PARAMETERS_ATTR, None)
        if captured is not None:
            return dict(captured)
        return generated_init_fields(self)

    @classmethod
    def from_parameters(cls, parameters: dict[str, object]) -> Workable:
        """Rebuild an instance from stored parameters; by default ``cls(**parameters)``."""
        return cls(**parameters)

    def to_document(self) -> WorkableDocument:
        return {
            "class": qualified_name(self),
            "parameters": self.export_parameters(),
            "method": self.method,
        }

    def as_job_of(self, recruiter: Enqueuer[R]) -> JobBuilder[R]:
        """Start building a job of this workable for ``recruiter`` (sync or async); the builder's
        ``enqueue()`` returns what the recruiter's own ``enqueue`` does (a handle, or an awaitable of one)."""
        from recruiter.domain.builder import JobBuilder

        return JobBuilder(self, recruiter)


def generated_init_fields(workable: object) -> dict[str, object]:
    """The arguments of an ``__init__`` written by ``@dataclass`` or ``attrs`` (which run after
    ``Workable.__init_subclass__``, so no call of theirs is captured): each field the constructor
    takes, under the name it takes it by (attrs strips a leading underscore: its ``alias``)."""
    if dataclasses.is_dataclass(workable):
        return {f.name: getattr(workable, f.name) for f in dataclasses.fields(workable) if f.init}
    attrs_fields = getattr(type(workable), "__attrs_attrs__", None)
    if attrs_fields is not None:
        return {getattr(a, "alias", None) or a.name.lstrip("_"): getattr(workable, a.name)
                for a in attrs_fields if a.init}
    return {}


def rebuild_problem(workable: Workable, parameters: Mapping[str, object]) -> str | None:
    """Why the job a worker would rebuild from ``parameters`` is not ``workable``, or None.

    The worker calls ``from_parameters`` on what was stored; a class whose parameters do not say
    how to build it again (a constructor argument not kept, a required field missing) is refused at
    enqueue, not on every worker. Equal means the rebuilt job exports the same parameters."""
    name = type(workable).__qualname__
    try:
        again = type(workable).from_parameters(dict(parameters))
        exported = again.export_parameters()
    except Exception as exc:  # noqa: BLE001 - the user's constructor: anything it raises is the reason
        return (f"{name} cannot be rebuilt from its stored parameters {sorted(parameters)}: "
                f"{type(exc).__name__}: {exc} (a worker calls {name}.from_parameters(parameters); keep every "
                "constructor argument, or override export_parameters and from_parameters)")
    if exported != dict(parameters) and not _same_bson(exported, parameters):
        return (f"{name} rebuilt from its stored parameters exports {sorted(exported)} instead of "
                f"{sorted(parameters)} with the same values: a worker would run another job "
                "(override export_parameters and from_parameters together)")
    return None


def _same_bson(a: Mapping[str, object], b: Mapping[str, object]) -> bool:
    """Equal once stored (NaN equals itself there); unencodable values are refused elsewhere."""
    try:
        return bson.encode(dict(a)) == bson.encode(dict(b))
    except (bson.errors.InvalidDocument, TypeError, OverflowError, ValueError):  # the size check says why
        return True


# The class attribute by which a class made by ``@recruiter.job`` (recruiter.domain.functions)
# names its function job: its stored name leads to that object, not to the class itself.
FUNCTION_ATTR = "__recruiter_function__"


def named_object(cls: type) -> object:
    """What the stored name of ``cls`` leads to: the class, or the function job it was made for."""
    return cls.__dict__.get(FUNCTION_ATTR, cls)


def workable_class(obj: object) -> type[Workable] | None:
    """The Workable subclass a stored name leads to: a class, or a function job's; None if neither."""
    cls = obj if isinstance(obj, type) else getattr(obj, "workable_class", None)
    if isinstance(cls, type) and issubclass(cls, Workable) and named_object(cls) is obj:
        return cls
    return None


def workable_from_document(doc: Raw) -> Workable:
    """Rebuild the workable stored in a job; raises on unknown classes or bad parameters."""
    cls = workable_class(import_qualified(doc["class"]))
    if cls is None:
        raise TypeError(f"{doc['class']} is not a recruiter.Workable subclass nor a function made a job by @job")
    parameters = cast(Mapping[str, object], doc.get("parameters") or {})  # documents.WORKABLE checked it
    return cls.from_parameters(dict(parameters))


def accepts_context(method: Callable[..., object]) -> bool:
    """Whether a bound ``execute`` takes the job context argument."""
    try:
        params = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params
    )
