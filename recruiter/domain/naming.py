"""Names as stored in MongoDB: classes (``"module:Qualname"``), groups and tenants.

Workables, retry policies and exception classes are all stored by name so that
the documents stay readable in ``mongosh`` and any process with the code on its
path can turn them back into objects.

Which modules a worker may import for a job is decided here, on the name alone,
before anything is imported (:class:`AllowedModules`): a stored name is input
from whoever can write to ``scheduled``, and importing a module runs its code.

Group and tenant names follow one rule (:func:`name_problem`), checked by the
producer, the worker's ``--group`` and the pause commands alike.
"""

from __future__ import annotations

import importlib
import itertools
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

ANY_GROUP = "*"
# Groups a job aimed at one worker is given (``@worker:<id>``, :mod:`recruiter.domain.placement`);
# no user group may start with it.
WORKER_GROUP_PREFIX = "@worker:"
MAX_NAME_CHARS = 200
# A directory on an import path is a package only if it holds code (naming.is_package); this
# many of its entries are looked at, at most.
PACKAGE_ENTRIES_READ = 1000
SHOWN_PREFIXES = 10  # allowed modules named in a refusal; the worker logs them all at start
# Modules no job may name: importing one runs a program (``python -m x`` runs ``x.__main__``).
_NEVER_IMPORTED = ("__main__", "__mp_main__")


class UnknownClass(LookupError):
    """A stored ``module:Qualname`` does not name an importable object."""


# Stored names are identifiers people query in the archive, so classes that moved
# into the sub-packages keep the name the archive already holds. Writing maps the
# module on the left to the one on the right; reading maps it back.
STABLE_MODULES = {
    "recruiter.domain.retry": "recruiter.retry",
    "recruiter.domain.naming": "recruiter.naming",
    "recruiter.processes.worker.child": "recruiter.child",
}
_FROM_STORED = {stored: actual for actual, stored in STABLE_MODULES.items()}


def _stored(cls: type) -> str:
    return f"{STABLE_MODULES.get(cls.__module__, cls.__module__)}:{cls.__qualname__}"


def qualified_name(obj: object) -> str:
    """``module:Qualname`` of a class (or of the class of an instance)."""
    cls = obj if isinstance(obj, type) else type(obj)
    if "<locals>" in cls.__qualname__:
        raise TypeError(
            f"{cls.__qualname__} is defined inside a function; "
            "define it at module level so other processes can import it"
        )
    return _stored(cls)


def split_qualified(name: object) -> tuple[str, str]:
    """``(module, qualname)`` of ``module:Qualname`` (or ``module.Name``), exactly as imported."""
    if not isinstance(name, str):
        raise UnknownClass(f"a class name must be a string, got {type(name).__name__}")
    if ":" in name:
        module_name, _, qualname = name.partition(":")
    else:
        module_name, _, qualname = name.rpartition(".")
    if not _dotted(module_name) or not _dotted(qualname):
        raise UnknownClass(f"{name!r} is not of the form 'module:Qualname'")
    return module_name, qualname


def _dotted(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))


def import_qualified(name: object) -> object:
    """Import the object named ``module:Qualname`` (``module.Name`` is accepted too)."""
    module_name, qualname = split_qualified(name)
    try:
        obj: object = importlib.import_module(_FROM_STORED.get(module_name, module_name))
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
        _stored(c) for c in exc_type.__mro__ if issubclass(c, BaseException)
    )


def class_names(value: object) -> list[str]:
    """Every ``class`` string in a stored document (a retry policy), nested ones included."""
    if isinstance(value, dict):
        own = [value["class"]] if isinstance(value.get("class"), str) else []
        return own + [n for v in value.values() for n in class_names(v)]
    if isinstance(value, list):
        return [n for v in value for n in class_names(v)]
    return []


def importable_problem(name: str, expected: object = None) -> str | None:
    """Why another process could not import ``name`` (``module:Qualname``); None if it can.

    Looks only at modules already imported here, so it runs no code. With
    ``expected``, the name must also lead back to that very object.
    """
    try:
        module_name, qualname = split_qualified(name)
    except UnknownClass as exc:
        return str(exc)
    if module_name.split(".")[-1] in _NEVER_IMPORTED:
        return (f"{name} is defined in {module_name}, the script being run, which other processes "
                "cannot import: define it in a module and import it from there")
    obj: object = sys.modules.get(_FROM_STORED.get(module_name, module_name))
    if obj is None:
        return f"{name}: module {module_name!r} is not imported here, so workers cannot import it either"
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return f"{name} is not found under that name in module {module_name!r}"
    if expected is not None and obj is not expected:
        return f"{name} names another object than the one given: define it at module level under its own name"
    return None


# -- groups and tenants ------------------------------------------------------


def name_problem(kind: str, name: object) -> str | None:
    """Why ``name`` cannot be a group or tenant name (``kind`` says which); None if it can.

    One rule everywhere: a non-empty string of at most ``MAX_NAME_CHARS``
    characters, no space at either end, no control character, no ``.`` or
    ``,``, not starting with ``$`` and not ``*`` (a worker's "any group").
    Names become field names in ``metadata``, and ``--group`` takes a comma list.
    """
    why = _name_rule(name)
    return None if why is None else f"invalid {kind} name {name!r}: {why}"


def _name_rule(name: object) -> str | None:
    if not isinstance(name, str) or not name.strip():
        return "it must be a non-empty string"
    if name == ANY_GROUP:
        return "'*' is reserved for workers that take any group"
    if len(name) > MAX_NAME_CHARS:
        return f"it is {len(name)} characters long; the limit is {MAX_NAME_CHARS}"
    if name != name.strip():
        return "it starts or ends with a space"
    if any(unicodedata.category(c) == "Cc" for c in name):
        return "it contains a control character"
    for bad in ".,":
        if bad in name:
            return f"it contains {bad!r}"
    if name.startswith("$"):
        return "it starts with '$'"
    if name.startswith(WORKER_GROUP_PREFIX):
        return f"names starting with {WORKER_GROUP_PREFIX!r} are reserved for jobs aimed at one worker (on_worker)"
    return None


# -- which modules a worker may import -----------------------------------------


def module_problem(prefix: str) -> str | None:
    """Why ``prefix`` cannot be an allowed module (``pkg`` or ``pkg.sub``); None if it can."""
    if not _dotted(prefix):
        return f"{prefix!r} is not a module name such as 'myapp' or 'myapp.jobs'"
    if any(part in _NEVER_IMPORTED for part in prefix.split(".")):
        return f"{prefix!r} names a __main__ module, which runs a program when imported"
    return None


def _is_code(entry: Path) -> bool:
    """A file Python imports as a module: ``.py``, ``.pyc``, or an extension (``.so``)."""
    return entry.suffix in (".py", ".pyc") or ".so" in entry.suffixes


def is_package(directory: Path) -> bool:
    """Whether ``directory`` is a Python package: an ``__init__.py``, or (a namespace package)
    modules of its own or a subdirectory with an ``__init__.py``. A data directory (``logs``,
    ``static``) is not. Looks one level down, at most :data:`PACKAGE_ENTRIES_READ` entries."""
    try:
        entries = list(itertools.islice(directory.iterdir(), PACKAGE_ENTRIES_READ))
    except OSError:
        return False
    if any(e.is_file() and _is_code(e) for e in entries):
        return True
    return any(e.is_dir() and e.name.isidentifier() and (e / "__init__.py").is_file() for e in entries)


def modules_under(path: str | Path) -> list[str]:
    """Top-level modules and packages a directory on ``sys.path`` provides (no code is run):
    modules, and directories that are packages (:func:`is_package`), not data directories."""
    found: set[str] = set()
    try:
        entries = list(Path(path).iterdir())
    except OSError:
        return []
    for entry in entries:
        name = entry.name.partition(".")[0] if entry.is_file() else entry.name
        if not name.isidentifier() or name.startswith("__"):  # __pycache__, __main__
            continue
        if (entry.is_dir() and is_package(entry)) or (entry.is_file() and _is_code(entry)):
            found.add(name)
    return sorted(found)


@dataclass(frozen=True)
class AllowedModules:
    """Module prefixes a worker may import for a job; ``foo`` allows ``foo`` and ``foo.bar``, not ``foobar``.

    ``recruiter.retry`` (the built-in retry policies) is always allowed; a
    ``__main__`` module never is.
    """

    prefixes: tuple[str, ...]

    BUILT_IN: ClassVar[tuple[str, ...]] = ("recruiter.retry",)

    def allows(self, module_name: str) -> bool:
        parts = module_name.split(".")
        if any(part in _NEVER_IMPORTED for part in parts):
            return False
        return any(module_name == p or module_name.startswith(p + ".") for p in (*self.BUILT_IN, *self.prefixes))

    def refusal(self, name: object) -> str | None:
        """``class not allowed: …`` if importing ``name`` is not allowed (or it is no class name)."""
        try:
            module_name, _ = split_qualified(name)
        except UnknownClass as exc:
            return f"class not allowed: {exc}"
        if self.allows(module_name):
            return None
        shown = self.prefixes[:SHOWN_PREFIXES]
        allowed = ", ".join(shown) + (f" and {len(self.prefixes) - len(shown)} more" if shown != self.prefixes else "")
        allowed = allowed or "none"
        return f"class not allowed: {name} (module {module_name!r} is not in the worker's allowed modules: {allowed})"
