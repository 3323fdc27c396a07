"""The MongoDB deployment recruiter needs, judged from the server's ``hello`` reply.

Rounds, batches, unique keys and schedules write in transactions, and waiting uses change
streams: both need a replica set (one node will do) or a sharded cluster, of MongoDB 6.0 or newer.
A standalone ``mongod`` has neither, so a process refuses to start on one, in one line, rather
than failing later on its first transaction. The reply is the server's, so it is read as untrusted.
"""

from __future__ import annotations

from collections.abc import Mapping

# MongoDB 6.0 speaks wire version 17 (7.0: 21, 8.0: 25); the oldest release recruiter supports.
MIN_WIRE_VERSION = 17
MIN_SERVER = "6.0"
# What each wire version from the minimum on means, for the refusal's wording.
WIRE_RELEASES = {17: "6.0", 21: "7.0", 25: "8.0"}


def deployment_problem(hello: Mapping[str, object], where: str) -> str | None:
    """Why the server that sent ``hello`` (at ``where``) cannot carry recruiter, or None.

    A replica set member names its set (``setName``); a ``mongos`` says ``msg: "isdbgrid"``;
    anything else is standalone. ``maxWireVersion`` gives the release."""
    if not isinstance(hello, Mapping):
        return f"MongoDB at {where} answered hello with a {type(hello).__name__}, not a document"
    wire = hello.get("maxWireVersion")
    if isinstance(wire, bool) or not isinstance(wire, int):
        return f"MongoDB at {where} did not say its version (maxWireVersion {wire!r}); recruiter needs {MIN_SERVER}+"
    if wire < MIN_WIRE_VERSION:
        return (f"MongoDB at {where} is older than {MIN_SERVER} (wire version {wire}, {MIN_SERVER} is "
                f"{MIN_WIRE_VERSION}): recruiter needs MongoDB {MIN_SERVER} or newer")
    is_set = isinstance(hello.get("setName"), str) and bool(hello.get("setName"))
    if not is_set and hello.get("msg") != "isdbgrid":
        return (f"MongoDB at {where} is a standalone server: recruiter needs a replica set (one node will do: "
                "start mongod with --replSet rs0 and run rs.initiate() once) or a sharded cluster, "
                "for its transactions and change streams")
    return None
