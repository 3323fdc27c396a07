"""Functions as jobs: ``@job(...)`` makes a job of a typed function, beside the class form.

::

    @job(group="billing", retry_policy=ExponentialBackoff(times=5, initial=timedelta(seconds=1)))
    def send_invoice(invoice_id: str, *, copy_to: str | None = None) -> dict[str, str]:
        ...

    send_invoice.enqueue(rec, "INV-1", copy_to="ops@example.com")   # a JobHandle (awaitable for AsyncRecruiter)
    send_invoice.job(rec, "INV-2").schedule_in(minutes=5).enqueue()   # a JobBuilder, for per-job options
    send_invoice("INV-3")                                             # still a plain call

The call's arguments are typed by the function's own signature (``ParamSpec``). A job is stored
as any other: its ``workable`` names the function (``tasks:send_invoice``) and its parameters
are the call's arguments by name (positional ones too), bound to the signature at enqueue, so a
call that does not fit is refused there with one line. A worker imports that name and finds the
function job, whose generated :class:`FunctionWorkable` subclass it runs: an ``async def``
function as an async job. A function whose first parameter is annotated ``JobContext`` (or named
``ctx``) gets the job's context there; it is not an argument of the call and is not stored.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, ClassVar, Concatenate, Generic, ParamSpec, TypeVar, cast, overload

from recruiter.domain.builder import Enqueuer, JobBuilder
from recruiter.domain.job import JobRefused, check_policy, check_timeout, checked_max_snoozes, checked_name
from recruiter.domain.retry import RetryPolicy
from recruiter.domain.unique import UniqueRefused, unique
from recruiter.domain.workable import FUNCTION_ATTR, JobContext, Workable

P = ParamSpec("P")
R = TypeVar("R")  # what the function returns (a coroutine for an ``async def``)
H = TypeVar("H")  # what the recruiter's ``enqueue`` returns


class FunctionWorkable(Workable):
    """The job of a function made a job by :func:`job`: one subclass per function, named as the
    function, holding the call's arguments by name (:meth:`export_parameters`)."""

    function: ClassVar[Callable[..., Any]]
    signature: ClassVar[inspect.Signature]  # the function's, without its context parameter
    takes_context: ClassVar[bool] = False
    unique_key_of: ClassVar[Callable[..., str | None] | None] = None

    def __init__(self, arguments: Mapping[str, object]) -> None:
        self.arguments = dict(arguments)

    def export_parameters(self) -> dict[str, object]:
        return dict(self.arguments)

    @classmethod
    def from_parameters(cls, parameters: dict[str, object]) -> FunctionWorkable:
        """Checks the stored parameters against the function's signature (as it is now, in this process)."""
        args, kwargs = cls.call_of(parameters)
        try:
            cls.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{cls.__qualname__} cannot take its stored parameters {sorted(parameters)}: "
                            f"{exc}") from None
        return cls(parameters)

    @classmethod
    def call_of(cls, arguments: Mapping[str, object]) -> tuple[list[object], dict[str, object]]:
        """The positional and keyword arguments of the call the stored ``arguments`` describe:
        the positional-only parameters in order, everything else by name."""
        rest = dict(arguments)
        args: list[object] = []
        for param in cls.signature.parameters.values():
            if param.kind is not inspect.Parameter.POSITIONAL_ONLY or param.name not in rest:
                break
            args.append(rest.pop(param.name))
        return args, rest

    def call(self, ctx: JobContext) -> Any:
        args, kwargs = self.call_of(self.arguments)
        if self.takes_context:
            args.insert(0, ctx)
        return type(self).function(*args, **kwargs)

    def unique_key(self) -> str | None:
        key_of = type(self).unique_key_of
        if key_of is None:
            return None
        args, kwargs = self.call_of(self.arguments)
        return key_of(*args, **kwargs)


class _SyncFunctionWorkable(FunctionWorkable):
    def execute(self, ctx: JobContext) -> object:
        return self.call(ctx)


class _AsyncFunctionWorkable(FunctionWorkable):
    async def execute(self, ctx: JobContext) -> object:
        return await self.call(ctx)


class FunctionJob(Generic[P, R]):
    """What :func:`job` makes of a function: call it as before, or make jobs of its calls.

    ``enqueue``, ``job`` and ``workable`` take the function's own arguments (without the job
    context), type-checked against its signature by mypy and bound to it at run time: a call
    that does not fit is refused with :class:`JobRefused` and one line, before anything is
    written. ``workable_class`` is the :class:`FunctionWorkable` subclass its jobs are.
    """

    workable_class: type[FunctionWorkable]

    def __init__(self, fn: Callable[..., R], workable_class: type[FunctionWorkable]) -> None:
        functools.update_wrapper(cast(Any, self), fn)  # its name, module and docstring: the function's
        self._fn = fn
        self.workable_class = workable_class
        setattr(workable_class, FUNCTION_ATTR, self)  # the object its stored name leads to

    def workable(self, *args: P.args, **kwargs: P.kwargs) -> FunctionWorkable:
        """The job of this call, as a workable (for ``rec.enqueue_many`` or ``run_inline``);
        :class:`JobRefused` with one line if the call does not fit the function's signature."""
        cls = self.workable_class
        try:
            bound = cls.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise JobRefused(f"{cls.__qualname__}{_plain(cls.signature)}: {exc}") from None
        arguments: dict[str, object] = {}
        for name, value in bound.arguments.items():
            if cls.signature.parameters[name].kind is not inspect.Parameter.VAR_KEYWORD:
                arguments[name] = value
            elif clash := sorted(set(value) & (set(cls.signature.parameters) - {name})):
                raise JobRefused(f"{cls.__qualname__}: keyword argument {clash[0]!r} has the name of a "
                                 "parameter, so it cannot be stored by name")
            else:
                arguments.update(value)
        return cls(arguments)

    def job(self, recruiter: Enqueuer[H], /, *args: P.args, **kwargs: P.kwargs) -> JobBuilder[H]:
        """A job builder of this call for ``recruiter``, to give it per-job options."""
        return JobBuilder(self.workable(*args, **kwargs), recruiter)

    def enqueue(self, recruiter: Enqueuer[H], /, *args: P.args, **kwargs: P.kwargs) -> H:
        """Enqueue this call on ``recruiter``: its handle for a Recruiter, an awaitable of it for an AsyncRecruiter."""
        return self.job(recruiter, *args, **kwargs).enqueue()

    def __repr__(self) -> str:
        return f"<job {self.workable_class.__module__}:{self.workable_class.__qualname__}>"


class PlainFunctionJob(FunctionJob[P, R]):
    """A function made a job by :func:`job` that takes no job context; calling it calls the function."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._fn(*args, **kwargs)


class ContextFunctionJob(FunctionJob[P, R]):
    """A function made a job by :func:`job` that takes the job's context first; calling it calls
    the function (with a context of your own); its jobs' arguments leave the context out."""

    def __call__(self, ctx: JobContext, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._fn(ctx, *args, **kwargs)


class JobDecorator:
    """``job(...)``: the options every job of the decorated function gets."""

    def __init__(self, options: dict[str, Any], key_of: Callable[..., str | None] | None) -> None:
        self._options = options
        self._key_of = key_of

    @overload
    def __call__(self, fn: Callable[Concatenate[JobContext, P], R]) -> ContextFunctionJob[P, R]: ...

    @overload
    def __call__(self, fn: Callable[P, R]) -> PlainFunctionJob[P, R]: ...

    def __call__(self, fn: Callable[..., Any]) -> FunctionJob[Any, Any]:
        if not inspect.isfunction(fn):
            raise TypeError(f"@job decorates a function, got {fn!r}")
        signature = inspect.signature(fn)
        takes_context = _takes_context(fn, signature)
        params = list(signature.parameters.values())[1 if takes_context else 0:]
        if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
            raise TypeError(f"{fn.__qualname__} takes *args; a job's arguments are stored by name")
        base = _AsyncFunctionWorkable if inspect.iscoroutinefunction(fn) else _SyncFunctionWorkable
        key_of = None if self._key_of is None else staticmethod(self._key_of)
        cls = type(fn.__name__, (base,), {
            **self._options, "__module__": fn.__module__, "__qualname__": fn.__qualname__, "__doc__": fn.__doc__,
            "function": staticmethod(fn), "signature": signature.replace(parameters=params),
            "takes_context": takes_context, "unique_key_of": key_of,
        })
        return (ContextFunctionJob if takes_context else PlainFunctionJob)(fn, cls)


def _plain(signature: inspect.Signature) -> inspect.Signature:
    """``signature`` without its annotations, as a refusal shows it: ``f(invoice_id, *, copy_to=None)``."""
    return signature.replace(parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
                             return_annotation=inspect.Signature.empty)


def _takes_context(fn: Callable[..., object], signature: inspect.Signature) -> bool:
    """Whether ``fn`` takes the job's context: a parameter annotated ``JobContext`` or named
    ``ctx``, which must be its first, positional one (so that typing can leave it out)."""
    found = [i for i, p in enumerate(signature.parameters.values()) if p.name == "ctx" or _is_context(p.annotation)]
    if not found:
        return False
    first = next(iter(signature.parameters.values()))
    if found != [0] or first.kind not in (first.POSITIONAL_ONLY, first.POSITIONAL_OR_KEYWORD):
        raise TypeError(f"{fn.__qualname__} takes the job's context: make it the first parameter, "
                        "positional (def f(ctx: JobContext, ...))")
    return True


def _is_context(annotation: object) -> bool:
    if isinstance(annotation, str):  # from __future__ import annotations
        return annotation.rpartition(".")[2] == "JobContext"
    return annotation is JobContext


@overload
def job(fn: Callable[Concatenate[JobContext, P], R], /) -> ContextFunctionJob[P, R]: ...


@overload
def job(fn: Callable[P, R], /) -> PlainFunctionJob[P, R]: ...


@overload
def job(*, group: str | None = None, retry_policy: RetryPolicy | None = None,
        timeout: float | timedelta | None = None, at_most_once: bool = False,
        unique_key: Callable[..., str | None] | None = None, unique_scope: str | timedelta = "unfinished",
        unique_on_conflict: str = "existing", max_snoozes: int | None = None) -> JobDecorator: ...


def job(fn: Callable[..., Any] | None = None, /, *, group: str | None = None,
        retry_policy: RetryPolicy | None = None, timeout: float | timedelta | None = None,
        at_most_once: bool = False, unique_key: Callable[..., str | None] | None = None,
        unique_scope: str | timedelta = "unfinished", unique_on_conflict: str = "existing",
        max_snoozes: int | None = None) -> FunctionJob[Any, Any] | JobDecorator:
    """Make a job of a function: ``@job`` or ``@job(group=..., retry_policy=...)``; it returns a
    :class:`FunctionJob` (``send_invoice.enqueue(rec, "INV-1")``, ``send_invoice.job(rec, ...)``,
    ``send_invoice.workable(...)``, and ``send_invoice(...)`` still calls the function).

    The options are the class attributes of the class form, given once: the default ``group``,
    ``retry_policy`` and ``timeout`` (seconds or a ``timedelta``) of its jobs, ``at_most_once``,
    and ``unique_key``, a function of the same arguments returning the job's unique key (or
    None), with its ``unique_scope`` and ``unique_on_conflict``, and ``max_snoozes`` (how many
    times each job may return ``Snooze(...)``, :mod:`recruiter.domain.snooze`). Each is checked here, with one
    line (:class:`JobRefused`); a function that takes ``*args``, or the job context elsewhere
    than first, is refused here with a ``TypeError``. The guide: "Functions as jobs" in
    Writing jobs.
    """
    options: dict[str, Any] = {"at_most_once": bool(at_most_once)}
    if group is not None:
        options["group"] = checked_name("group", group)
    if retry_policy is not None:
        options["retry_policy"] = check_policy(retry_policy)
    if timeout is not None:
        options["timeout_s"] = check_timeout(timeout)
    if max_snoozes is not None:
        options["max_snoozes"] = checked_max_snoozes(max_snoozes)
    try:
        unique("key", unique_scope, unique_on_conflict)
    except UniqueRefused as exc:
        raise JobRefused(str(exc)) from None
    options.update(unique_scope=unique_scope, unique_on_conflict=unique_on_conflict)
    decorator = JobDecorator(options, unique_key)
    return decorator if fn is None else decorator(fn)
