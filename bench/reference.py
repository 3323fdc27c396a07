"""What the server itself allows, measured in the same run as the benchmarks.

- the raw rate of the single-document operations a job's life needs (insert,
  find by ``_id``, update by ``_id``, delete by ``_id``, majority writes), each
  in a loop from one synchronous client;
- its change-notification latency: insert into a watched collection until the
  change stream delivers the event.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

from pymongo import MongoClient, WriteConcern

from bench.stats import percentiles


def _client(uri: str) -> MongoClient[Any]:
    return MongoClient(uri, tz_aware=True, w="majority", retryWrites=True)


def raw_rates(uri: str, ops: int) -> dict[str, Any]:
    """Operations per second of each single-document operation, one client, one at a time."""
    client = _client(uri)
    try:
        coll = client.get_default_database()["bench_raw"].with_options(write_concern=WriteConcern("majority"))
        coll.drop()
        body = {"workable": {"class": "bench.jobs:Noop", "parameters": {}, "method": "execute"},
                "locked": False, "group": "generic", "attempts": 0}
        ids = list(range(ops))
        timings: dict[str, float] = {}

        def timed(name: str, op: Any) -> None:
            start = time.perf_counter()
            for i in ids:
                op(i)
            timings[name] = time.perf_counter() - start

        timed("insert", lambda i: coll.insert_one({"_id": i, **body}))
        timed("find_by_id", lambda i: coll.find_one({"_id": i}))
        timed("update_by_id", lambda i: coll.update_one({"_id": i}, {"$set": {"locked": True}}))
        timed("delete_by_id", lambda i: coll.delete_one({"_id": i}))
        coll.drop()
    finally:
        client.close()
    rates = {name: ops / seconds for name, seconds in timings.items()}
    # One job's life done one operation after another: enqueue (insert), read it,
    # record the outcome (update), archive it (insert) and remove it (delete).
    life_s = 2 / rates["insert"] + 1 / rates["find_by_id"] + 1 / rates["update_by_id"] + 1 / rates["delete_by_id"]
    return {"ops_per_s": rates, "ops": ops, "job_life_ceiling_per_s": 1 / life_s,
            "job_life_ceiling": "1 / (2 x insert + find + update + delete), one client, one at a time"}


def notification_latency(uri: str, samples: int, gap_s: float = 0.02) -> dict[str, Any]:
    """Insert -> change event received, in milliseconds, over ``samples`` inserts."""
    client = _client(uri)
    try:
        coll = client.get_default_database()["bench_notify"]
        coll.drop()
        coll.insert_one({"_id": "warm-up"})
        sent: dict[int, float] = {}
        latencies: list[float] = []
        ready = threading.Event()
        failure: list[BaseException] = []

        def watch() -> None:
            try:
                with coll.watch([{"$match": {"operationType": "insert"}}], max_await_time_ms=100) as stream:
                    ready.set()
                    while len(latencies) < samples:
                        change = stream.try_next()
                        if change is None:
                            continue
                        received = time.perf_counter()
                        n = change["fullDocument"]["n"]
                        latencies.append((received - sent[n]) * 1000)
            except BaseException as exc:  # noqa: BLE001 - reported by the caller
                failure.append(exc)
                ready.set()

        watcher = threading.Thread(target=watch, name="bench-watch", daemon=True)
        watcher.start()
        ready.wait(30)
        for n in range(samples):
            sent[n] = time.perf_counter()
            coll.insert_one({"n": n})
            time.sleep(gap_s)
        watcher.join(30)
        if failure:
            raise failure[0]
        coll.drop()
    finally:
        client.close()
    result = percentiles(latencies)
    result["mean_ms"] = statistics.fmean(latencies) if latencies else None
    return result
