"""Connecting to MongoDB, with errors a person can read.

All clients are created here so that every process uses the same options:
aware UTC datetimes (``mongosh`` shows ``ISODate``), majority writes and
retryable writes, so the code is right on a replica set as well as on a single
node.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict

import pymongo
from pymongo import AsyncMongoClient, MongoClient
from pymongo.errors import ConfigurationError, InvalidURI, PyMongoError
from pymongo.monitoring import CommandListener as CommandListener  # re-exported: producers take listeners
from pymongo.uri_parser import parse_uri

from recruiter.domain.deployment import deployment_problem
from recruiter.store import names, privileges, strict
from recruiter.store.layout import AsyncClient, AsyncClientSession, AsyncDb, ClientSession, SyncClient, SyncDb

DEFAULT_URI = "mongodb://localhost:27017/recruiter"
DEFAULT_DATABASE = "recruiter"
URI_ENVVARS = ("RECRUITER_MONGODB_URI", "MONGODB_URI")


class ConnectionProblem(RuntimeError):
    """The target cannot be used: bad URI or unreachable server. The message is one line."""


@dataclass(frozen=True)
class Target:
    uri: str
    database: str
    prefix: str = ""  # the collection prefix (recruiter.store.names); "" for none

    @property
    def display(self) -> str:
        """The URI without credentials, for messages and logs."""
        try:
            parsed = parse_uri(self.uri, validate=False, warn=True)
        except (InvalidURI, ConfigurationError, ValueError):
            return "<invalid uri>"
        hosts = ",".join(f"{h}:{p}" for h, p in parsed["nodelist"])
        return f"mongodb://{hosts}/{self.database}"

    @property
    def hosts(self) -> list[tuple[str, int]]:
        """The URI's hosts and ports, as written (the URI was validated by :func:`parse_target`)."""
        return [(str(h), int(p)) for h, p in parse_uri(self.uri, validate=False)["nodelist"]]


def uri_from_environment() -> str:
    """``RECRUITER_MONGODB_URI``, else ``MONGODB_URI``, else the default URI."""
    for name in URI_ENVVARS:
        if os.environ.get(name):
            return os.environ[name]
    return DEFAULT_URI


def parse_target(uri: str | None, prefix: str | None = None) -> Target:
    """Validate a MongoDB URI and find its database (``recruiter`` when the URI names none),
    and check the collection prefix (:mod:`recruiter.store.names`).

    Without a URI or a prefix, the environment decides (:func:`uri_from_environment`,
    ``RECRUITER_COLLECTION_PREFIX``).
    """
    uri = (uri or uri_from_environment()).strip()
    try:
        parsed = parse_uri(uri, validate=True, warn=False)
    except (InvalidURI, ConfigurationError, ValueError) as exc:
        raise ConnectionProblem(f"invalid MongoDB URI {uri!r}: {exc}") from None
    try:
        prefix = names.check_prefix(names.prefix_from_environment() if prefix is None else prefix)
    except ValueError as exc:
        raise ConnectionProblem(str(exc)) from None
    return Target(uri=uri, database=parsed.get("database") or DEFAULT_DATABASE, prefix=prefix)


def with_database(uri: str, database: str) -> str:
    """``uri`` with its database replaced (options kept)."""
    head, sep, options = uri.partition("?")
    scheme, _, rest = head.partition("://")
    hosts = rest.split("/", 1)[0]
    return f"{scheme}://{hosts}/{database}{sep}{options}"


class _ClientOptions(TypedDict):
    tz_aware: bool
    serverSelectionTimeoutMS: int
    appname: str
    datetime_conversion: str
    retryWrites: bool
    w: str


def _client_options(server_selection_timeout_s: float, app_name: str, *, retry_writes: bool = True) -> _ClientOptions:
    return {
        "tz_aware": True,
        "serverSelectionTimeoutMS": int(server_selection_timeout_s * 1000),
        "appname": app_name,
        # A date outside Python's range is read as bson.DatetimeMS, not raised as an error,
        # so one such document cannot stop a process (recruiter.domain.documents rejects it).
        "datetime_conversion": "DATETIME_AUTO",
        "retryWrites": retry_writes,
        # An acknowledged job or outcome must survive a primary failover.
        "w": "majority",
    }


def _listeners(given: list[CommandListener] | None) -> list[CommandListener]:
    """The caller's listeners, then the write guard when ``RECRUITER_STRICT_WRITES`` asks for it
    (recruiter.store.strict): every client built here checks its writes against MongoDB's rules."""
    return [*(given or []), *strict.listeners(), *privileges.listeners()]


def sync_client(target: Target, *, app_name: str = "recruiter", server_selection_timeout_s: float = 10.0,
                event_listeners: list[CommandListener] | None = None, retry_writes: bool = True) -> SyncClient:
    return MongoClient(target.uri, event_listeners=_listeners(event_listeners),
                       **_client_options(server_selection_timeout_s, app_name, retry_writes=retry_writes))


def heartbeat_client(target: Target, *, app_name: str,
                     event_listeners: list[CommandListener] | None = None) -> SyncClient:
    """The client of a worker's heartbeat thread: a sync client whose writes are not retryable.

    A beat sets the same fields whenever it is sent, and the next beat replaces a
    lost one, so a driver retry buys nothing. A retryable write, though, costs the
    server a record of it (mongod writes one to ``config.transactions``; SecantusDB keeps
    them in memory and scans them on every retryable write), and beats are the most
    frequent writes an idle deployment makes.
    """
    return sync_client(target, app_name=app_name, event_listeners=event_listeners, retry_writes=False)


def async_client(target: Target, *, app_name: str = "recruiter", server_selection_timeout_s: float = 10.0,
                 event_listeners: list[CommandListener] | None = None) -> AsyncClient:
    return AsyncMongoClient(target.uri, event_listeners=_listeners(event_listeners),
                            **_client_options(server_selection_timeout_s, app_name))


def sync_db(client: SyncClient, target: Target) -> SyncDb:
    """The target's database on ``client``, its collections named with the target's prefix."""
    return names.sync_database(client, target.database, target.prefix)


def async_db(client: AsyncClient, target: Target) -> AsyncDb:
    """The same, on an asyncio client."""
    return names.async_database(client, target.database, target.prefix)


# Every error the driver raises: what the processes catch to survive a failed step
# (they import this name, not pymongo: only the store imports the driver).
StoreError = PyMongoError


def first_line(exc: BaseException, limit: int = 200) -> str:
    """The first line of an error's message (its class name if it has none), for logs."""
    return ((str(exc).splitlines() or [""])[0] or type(exc).__name__)[:limit]


def describe(exc: BaseException, target: Target) -> str:
    """One line saying what went wrong talking to ``target``."""
    name = type(exc).__name__
    if name in ("ServerSelectionTimeoutError", "AutoReconnect", "NetworkTimeout", "ConnectionFailure"):
        return f"cannot reach MongoDB at {target.display}: no server answered ({name})"
    if name == "OperationFailure" and getattr(exc, "code", None) in (13, 18):
        return f"MongoDB at {target.display} refused the credentials or the operation: {exc}"
    return f"MongoDB error at {target.display}: {first_line(exc, limit=300)}"


def wait_until_reachable(target: Target, timeout_s: float) -> None:
    """Ping the server until it answers or ``timeout_s`` passes, then raise ConnectionProblem."""
    deadline = time.monotonic() + timeout_s
    client = sync_client(target, server_selection_timeout_s=min(timeout_s, 2.0))
    try:
        while True:
            try:
                client.admin.command("ping")
                return
            except PyMongoError as exc:
                if time.monotonic() >= deadline:
                    raise ConnectionProblem(describe(exc, target)) from None
                time.sleep(0.2)
    finally:
        client.close()


class DeploymentRefused(ConnectionProblem):
    """The server answers but cannot carry recruiter (standalone, or too old): one line."""


def check_deployment(target: Target, timeout_s: float = 5.0) -> None:
    """Raise :class:`DeploymentRefused` unless ``target`` is a replica set or a sharded cluster
    of a supported release (:mod:`recruiter.domain.deployment`); one ``hello``."""
    client = sync_client(target, server_selection_timeout_s=timeout_s)
    try:
        reply = client.admin.command("hello")
    except PyMongoError as exc:
        raise ConnectionProblem(describe(exc, target)) from None
    finally:
        client.close()
    problem = deployment_problem(reply, target.display)
    if problem:
        raise DeploymentRefused(problem)


def answers_ping(client: SyncClient) -> bool:
    """Whether the server answers one ping (within the client's server selection timeout)."""
    try:
        client.admin.command("ping")
    except PyMongoError:
        return False
    return True


async def answers_ping_within(client: AsyncClient, timeout_s: float) -> bool:
    """Whether the server answers one ping within ``timeout_s``."""
    try:
        with pymongo.timeout(timeout_s):
            await client.admin.command("ping")
    except PyMongoError:
        return False
    return True


def hello(db: SyncDb) -> Mapping[str, object]:
    """The server's ``hello`` reply (e.g. its ``maxBsonObjectSize``)."""
    return db.command("hello")


async def hello_async(db: AsyncDb) -> Mapping[str, object]:
    """The server's ``hello`` reply, with the asyncio client."""
    return await db.command("hello")


def session_problem(client: object, session: object) -> str | None:
    """Why a caller's ``session`` cannot carry a write of ``client``; None if it can: it must be
    a session (of the same kind, sync or asyncio) started from that very client."""
    if not isinstance(session, ClientSession | AsyncClientSession):
        return f"session must be a pymongo client session, got {type(session).__name__}"
    if session.client is not client:
        return ("session belongs to another MongoClient than the recruiter's; start it from the "
                "recruiter's own client (rec.client.start_session())")
    if session.has_ended:
        return "session has ended"
    return None
