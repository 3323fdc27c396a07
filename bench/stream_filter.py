"""What the workers' change streams cost the server per roster write: the ids as one pattern, first,
against the ids as a list after the kinds of event (the filter before it), side by side.

``python -m bench.stream_filter [--processes 8] [--slots 25] [--lanes 2] [--jobs 400] [--rounds 3]``
registers the roster entries of ``--processes`` worker processes of ``--slots`` slots and
``--lanes`` lanes each (ids as workers make them), opens one change stream per process with its
filter, and writes what a job writes to the roster: an assignment with a job copy to one entry (an
event for one stream) and then its outcome (an event for none). Every stream reads all the time,
as the streams of processes with free slots do. A run ends once every stream has heard each
assignment of its own entries, and only those (checked: the two filters must agree). The filters
take turns in each round; the figures are medians over the rounds: the server's CPU per job (an
embedded server's, read from ``/proc``; ``-`` for an external one) and the wall time per job.

Uses the embedded server, or ``RECRUITER_TEST_MONGODB_URI``.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections import Counter
from typing import Any

import click
from bson import ObjectId
from pymongo import MongoClient

from bench.procs import cpu_seconds
from bench.server import running_server
from recruiter.domain.lanes import lane_ids
from recruiter.domain.records import Query
from recruiter.store.wakeup import watch_pipeline

FILTERS = ("listed", "pattern")


def _pipeline(kind: str, ids: list[str]) -> list[Query]:
    """The current pipeline (``pattern``), or the same with the filter before it (``listed``):
    the kinds of event first, then the ids as a list."""
    match, *rest = watch_pipeline(ids)
    if kind == "pattern":
        return [match, *rest]
    condition = match["$match"]
    assert isinstance(condition, dict)
    kinds = {k: v for k, v in condition.items() if k != "documentKey._id"}
    return [{"$match": {**kinds, "documentKey._id": {"$in": ids}}}, *rest]


class Listener(threading.Thread):
    """One process's stream, reading all the time: counts the events it hears, by entry id, and
    its empty replies."""

    def __init__(self, uri: str, pipeline: list[Query]) -> None:
        super().__init__(daemon=True)
        self.client: MongoClient[Any] = MongoClient(uri)
        self.stream = self.client.get_default_database().roster.watch(pipeline, max_await_time_ms=500)
        self.heard: Counter[str] = Counter()
        self.empty = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            event = self.stream.try_next()
            if event is None:
                self.empty += 1
            else:
                self.heard[event["documentKey"]["_id"]] += 1

    def close(self) -> None:
        self.stop.set()
        self.join(10)
        self.stream.close()
        self.client.close()


def register(db: Any, processes: list[list[str]]) -> None:
    """The roster entries of ``processes`` (each a list of entry ids), free."""
    db.roster.insert_many([{"_id": i, "available": True} for ids in processes for i in ids])


def write_job(db: Any, entry: str, n: int) -> None:
    """What job ``n`` writes to the roster entry ``entry``: its assignment (an event for the entry's
    stream), then its outcome (an event for none)."""
    token = ObjectId()  # a new value: an update that changes nothing has no event
    db.roster.update_one({"_id": entry}, {"$set": {"job": {"_id": n, "lock_token": token}, "available": False}})
    db.roster.update_one({"_id": entry}, {"$set": {"outcome": {"job": n, "token": token}, "available": True}})


def _one_run(uri: str, pid: int | None, kind: str, processes: list[list[str]], jobs: int) -> dict[str, Any]:
    client: MongoClient[Any] = MongoClient(uri)
    db = client.get_default_database()
    listeners = [Listener(uri, _pipeline(kind, ids)) for ids in processes]
    for listener in listeners:
        listener.start()
    entries = [i for ids in processes for i in ids]
    expected: Counter[str] = Counter(entries[n % len(entries)] for n in range(jobs))
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    for n in range(jobs):
        write_job(db, entries[n % len(entries)], n)
    deadline = time.monotonic() + 120
    while sum(sum(x.heard.values()) for x in listeners) < jobs and time.monotonic() < deadline:
        time.sleep(0.01)
    wall, cpu1 = time.perf_counter() - t0, cpu_seconds(pid)
    for listener in listeners:
        listener.close()
    heard: Counter[str] = Counter()
    for ids, listener in zip(processes, listeners, strict=True):
        strays = set(listener.heard) - set(ids)
        if strays:
            raise SystemExit(f"bench: the {kind} filter heard another process's entries: {strays}")
        heard.update(listener.heard)
    if heard != expected:
        raise SystemExit(f"bench: the {kind} filter heard {sum(heard.values())} of {jobs} assignments")
    client.close()
    return {"wall_ms_per_job": 1000 * wall / jobs,
            "server_cpu_ms_per_job": None if cpu0 is None or cpu1 is None else 1000 * (cpu1 - cpu0) / jobs}


def median_of(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r[key] is not None]
    return statistics.median(values) if values else None


def cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


@click.command()
@click.option("--processes", default=8, show_default=True, type=click.IntRange(1))
@click.option("--slots", default=25, show_default=True, type=click.IntRange(1), help="Slots per process.")
@click.option("--lanes", default=2, show_default=True, type=click.IntRange(1, 17), help="Lanes per slot.")
@click.option("--jobs", default=400, show_default=True, type=click.IntRange(1), help="Jobs per run.")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1))
def main(processes: int, slots: int, lanes: int, jobs: int, rounds: int) -> None:
    with running_server() as server:
        uri = server.database_uri("bench_stream_filter")
        client: MongoClient[Any] = MongoClient(uri)
        client.drop_database("bench_stream_filter")
        slot_ids = [[f"w{p:02d}-{s}" if slots > 1 else f"w{p:02d}" for s in range(slots)] for p in range(processes)]
        ids = [[lane for slot in process for lane in lane_ids(slot, lanes - 1)] for process in slot_ids]
        register(client.get_default_database(), ids)
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in FILTERS}
        for _ in range(rounds):
            for kind in FILTERS:
                runs[kind].append(_one_run(uri, server.pid, kind, ids, jobs))
        client.drop_database("bench_stream_filter")
        client.close()
        print(f"server: {server.description}; {processes} streams of {slots} slots x {lanes} lanes, "
              f"{jobs} jobs a run (an assignment and an outcome each), median of {rounds} rounds")
        print(f"{'filter':<10}{'server CPU ms/job':>20}{'wall ms/job':>14}")
        for kind in FILTERS:
            print(f"{kind:<10}{cell(median_of(runs[kind], 'server_cpu_ms_per_job')):>20}"
                  f"{cell(median_of(runs[kind], 'wall_ms_per_job')):>14}")
        for key in ("server_cpu_ms_per_job", "wall_ms_per_job"):
            before, after = median_of(runs["listed"], key), median_of(runs["pattern"], key)
            ratio = "-" if not before or after is None else f"{after / before:.2f}x"
            print(f"pattern / listed, {key.replace('_', ' ')}: {ratio}")
        print(json.dumps({"runs": runs}))


if __name__ == "__main__":
    main()
