"""A server that has run a while, for ``bin/bench --aged-server``.

The embedded server keeps the reply of every retryable write (an ``update_one``, an
``insert_one``...) for 30 minutes, up to 10 000 of them, and goes through all it keeps on each
retryable write, sorting them once it holds 10 000 (:mod:`recruiter.store.unrecorded`). A fresh
server keeps none, so a short run on it measures what a user sees only in the first minutes. Run
on an aged server, the same figures tell the steady state: before the worker's outcome stopped
being a retryable write, a server of 200 slots went from 105 to 63 jobs/s that way.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pymongo import MongoClient, monitoring

from bench.server import Server

# More than the 10 000 replies the embedded server keeps at most.
AGED_WRITES = 10_500


def age(server: Server, writes: int = AGED_WRITES,
        event_listeners: Sequence[monitoring.CommandListener] = ()) -> float:
    """Send ``writes`` retryable writes to a scratch database of ``server``, then drop it; the
    seconds it took. The replies stay with the server, not with the database."""
    name = f"bench_aging_{os.getpid()}"
    client: MongoClient[dict[str, object]] = MongoClient(server.database_uri(name), retryWrites=True,
                                                         event_listeners=list(event_listeners))
    began = time.perf_counter()
    try:
        counter = client[name]["counter"]
        for n in range(writes):
            counter.update_one({"_id": 1}, {"$set": {"n": n}}, upsert=True)
        client.drop_database(name)
    finally:
        client.close()
    return time.perf_counter() - began


@dataclass
class Aging:
    """``--aged-server`` across a run: :meth:`ready` ages each server once, just before the first
    series that runs on it (a server no series runs on is left alone, and the reference figures,
    measured first, are a fresh server's)."""

    on: bool
    say: Callable[[str], None]
    done: set[str] = field(default_factory=set)  # the servers aged, by uri

    def ready(self, server: Server) -> Server:
        if self.on and server.uri not in self.done:
            self.done.add(server.uri)
            self.say(f"bench: aged the server with {AGED_WRITES} retryable writes in {age(server):.1f} s")
        return server
