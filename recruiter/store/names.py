"""A deployment's collection prefix: recruiter's collections beside an application's own.

Without a prefix (the default, and every 0.1.1 deployment) the collections are named
``scheduled``, ``archived``, ``roster``, ... in the URI's database. With one, each name
is the prefix as written followed by the name: prefix ``recruiter_`` gives
``recruiter_scheduled``. The prefix ends with its separator (``_`` or ``.``), so what the
user writes is what the server shows.

One place applies it: :func:`sync_database` / :func:`async_database` hand out a database
handle whose ``db[NAME]`` gives recruiter's names (:data:`recruiter.store.layout.NAMES`)
their prefix and leaves any other name as is (the driver's own ``$cmd`` namespaces, a
cursor's full collection name). Every module names its collections through the
constants of :mod:`recruiter.store.layout` on such a handle, so none of them knows the
prefix; the few that name a collection inside a command or a change stream's
``ns.coll`` ask :func:`collection_name` / :func:`prefix_of`.
"""

from __future__ import annotations

import os
import re
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError
from pymongo.synchronous.database import Database

from recruiter.store.layout import NAMES, AsyncClient, AsyncColl, AsyncDb, Document, SyncClient, SyncColl, SyncDb

PREFIX_ENVVAR = "RECRUITER_COLLECTION_PREFIX"
MAX_PREFIX = 64
# Letters, digits, '_', '-' and '.', not starting with '.' nor '-', ending with the separator.
_VALID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*[_.]")


def prefix_problem(prefix: str) -> str | None:
    """Why ``prefix`` cannot be a collection prefix (one line), or None when it can ("" is none)."""
    if prefix == "":
        return None
    if len(prefix) > MAX_PREFIX:
        return f"longer than {MAX_PREFIX} characters"
    if prefix.startswith("system."):
        return "'system.' names are the server's own"
    if "$" in prefix or "\x00" in prefix:
        return "'$' and NUL cannot be in a collection name"
    if ".." in prefix:
        return "an empty part between two dots"
    if not _VALID.fullmatch(prefix):
        return ("use letters, digits, '_', '-' and '.', start with a letter, a digit or '_' and end with "
                "the separator '_' or '.' (e.g. 'recruiter_')")
    return None


def check_prefix(prefix: str) -> str:
    """``prefix``, or ValueError with one line saying why it cannot be one."""
    problem = prefix_problem(prefix)
    if problem:
        raise ValueError(f"invalid collection prefix {prefix!r}: {problem}")
    return prefix


def prefix_from_environment() -> str:
    """``RECRUITER_COLLECTION_PREFIX`` (not checked here), else none."""
    return os.environ.get(PREFIX_ENVVAR, "")


class PrefixedDatabase(Database[Document]):
    """A sync database handle that gives recruiter's collection names the prefix."""

    def __init__(self, client: SyncClient, name: str, prefix: str, **options: Any) -> None:
        super().__init__(client, name, **options)
        self.prefix = prefix

    def __getitem__(self, name: str) -> SyncColl:
        return super().__getitem__(self.prefix + name if name in NAMES else name)

    def get_collection(self, name: str, *args: Any, **kwargs: Any) -> SyncColl:
        return super().get_collection(self.prefix + name if name in NAMES else name, *args, **kwargs)

    def with_options(self, *args: Any, **kwargs: Any) -> PrefixedDatabase:  # type: ignore[override]
        plain = super().with_options(*args, **kwargs)
        return PrefixedDatabase(self.client, self.name, self.prefix, codec_options=plain.codec_options,
                                read_preference=plain.read_preference, write_concern=plain.write_concern,
                                read_concern=plain.read_concern)


class AsyncPrefixedDatabase(AsyncDatabase[Document]):
    """The asyncio handle of the same kind."""

    def __init__(self, client: AsyncClient, name: str, prefix: str, **options: Any) -> None:
        super().__init__(client, name, **options)
        self.prefix = prefix

    def __getitem__(self, name: str) -> AsyncColl:
        return super().__getitem__(self.prefix + name if name in NAMES else name)

    def get_collection(self, name: str, *args: Any, **kwargs: Any) -> AsyncColl:
        return super().get_collection(self.prefix + name if name in NAMES else name, *args, **kwargs)

    async def watch(self, pipeline: Any = None, *args: Any, **kwargs: Any) -> Any:
        """A change stream on the database (the recruiter's doorbell), ``pipeline`` written with
        recruiter's names: its ``ns.coll`` filters get the prefix, and its events come back with
        recruiter's names in ``ns.coll``, so the code that reads them knows no prefix."""
        return await super().watch([*in_namespace(pipeline or [], self.prefix), _unprefixed(self.prefix)],
                                   *args, **kwargs)

    def with_options(self, *args: Any, **kwargs: Any) -> AsyncPrefixedDatabase:  # type: ignore[override]
        plain = super().with_options(*args, **kwargs)
        return AsyncPrefixedDatabase(self.client, self.name, self.prefix, codec_options=plain.codec_options,
                                     read_preference=plain.read_preference, write_concern=plain.write_concern,
                                     read_concern=plain.read_concern)


def sync_database(client: SyncClient, name: str, prefix: str = "") -> SyncDb:
    """The database ``name`` of ``client``, its collections named with ``prefix`` (checked)."""
    return PrefixedDatabase(client, name, check_prefix(prefix)) if prefix else client[name]


def async_database(client: AsyncClient, name: str, prefix: str = "") -> AsyncDb:
    """The same, for the asyncio client."""
    return AsyncPrefixedDatabase(client, name, check_prefix(prefix)) if prefix else client[name]


def prefix_of(db: SyncDb | AsyncDb) -> str:
    """The collection prefix of ``db`` ("" for a plain handle)."""
    return db.prefix if isinstance(db, PrefixedDatabase | AsyncPrefixedDatabase) else ""


def collection_name(db: SyncDb | AsyncDb, name: str) -> str:
    """The name the server knows ``name`` by in ``db`` (for a command that names a collection)."""
    return prefix_of(db) + name


def bare_name(db: SyncDb | AsyncDb, full: str) -> str:
    """Recruiter's name of the collection the server calls ``full`` (a change event's ``ns.coll``);
    "" for a collection that is not recruiter's under this prefix."""
    prefix = prefix_of(db)
    name = full[len(prefix):] if full.startswith(prefix) else ""
    return name if name in NAMES else ""


def foreign_collections(names: list[str], prefix: str) -> list[str]:
    """The collections among ``names`` (a database's) that are not recruiter's under ``prefix``
    (nor the server's own ``system.*``), sorted."""
    ours = {prefix + n for n in NAMES}
    return sorted(n for n in names if n not in ours and not n.startswith("system."))


def foreign_warning(foreign: list[str], prefix: str, shown: int = 3) -> str | None:
    """The one-line warning for a database that holds collections not recruiter's, or None."""
    if not foreign:
        return None
    names = ", ".join(foreign[:shown]) + (f" and {len(foreign) - shown} more" if len(foreign) > shown else "")
    using = f"prefix {prefix!r}" if prefix else "no collection prefix"
    return (f"this database holds {len(foreign)} collection(s) that are not recruiter's ({names}; {using}): "
            f"give recruiter its own database in the URI, or a collection prefix "
            f"(--collection-prefix / {PREFIX_ENVVAR}, e.g. 'recruiter_')")


# Names only, of the collections the user may use: one command, which needs no privilege (a role
# of docs/operations/security.md without listCollections gets the collections it is granted).
_LISTING: dict[str, Any] = {"authorizedCollections": True}


def shared_database_warning(db: SyncDb) -> str | None:
    """The warning for ``db`` (:func:`foreign_warning`) after one ``listCollections`` (nameOnly);
    None when the database holds only recruiter's collections, or cannot be listed (the check is
    advice: the caller runs on)."""
    try:
        found = db.list_collection_names(**_LISTING)
    except PyMongoError:
        return None
    return foreign_warning(foreign_collections(found, prefix_of(db)), prefix_of(db))


async def shared_database_warning_async(db: AsyncDb) -> str | None:
    """The same, with the asyncio client (a process at start-up)."""
    try:
        found = await db.list_collection_names(**_LISTING)
    except PyMongoError:
        return None
    return foreign_warning(foreign_collections(found, prefix_of(db)), prefix_of(db))


def _unprefixed(prefix: str) -> dict[str, Any]:
    """A change stream stage that gives an event's ``ns.coll`` back its name without ``prefix``."""
    return {"$set": {"ns.coll": {"$cond": [{"$eq": [{"$indexOfCP": ["$ns.coll", prefix]}, 0]},
                                           {"$substrCP": ["$ns.coll", len(prefix), 255]}, "$ns.coll"]}}}


def in_namespace(pipeline: Any, prefix: str) -> Any:
    """A change stream ``pipeline`` written with recruiter's names, each collection it compares
    ``ns.coll`` to (``{"ns.coll": name}``, ``["$ns.coll", name]``) given ``prefix``."""
    if not prefix:
        return pipeline
    if isinstance(pipeline, dict):
        return {k: prefix + v if k == "ns.coll" and isinstance(v, str) else in_namespace(v, prefix)
                for k, v in pipeline.items()}
    if isinstance(pipeline, list):
        if len(pipeline) == 2 and pipeline[0] == "$ns.coll" and isinstance(pipeline[1], str):
            return [pipeline[0], prefix + pipeline[1]]
        return [in_namespace(v, prefix) for v in pipeline]
    return pipeline
