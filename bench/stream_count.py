"""What each waiting change stream adds to the server's cost of a write: the same roster writes with
0, 1, 2, ... streams open, side by side in one run.

``python -m bench.stream_count [--streams 0,1,2,4,8,16] [--jobs 300] [--rounds 3]`` registers one
worker process's roster entries per stream (one slot, two lanes: the layout of ``bin/bench``'s
single-slot workers), opens that many streams with the workers' filter, each reading all the time
as the stream of a process with a free lane does, and writes what a job writes to the roster: an
assignment to one entry (an event for one stream) and its outcome (an event for none). With no
stream, the same writes go to the same entries. The counts take turns in each round; the figures
are medians over the rounds: the server's CPU per write (an embedded server's, read from
``/proc``; ``-`` for an external one), its ratio to the run without streams, and the empty
replies the streams received per write (a stream woken by a write that is not its own).

On the embedded server every write wakes every waiting stream, which then reads and decodes the
oplog entries since its position, whatever their collection, before its filter is applied; so a
write's cost grows with the streams open. That is the cost a worker process adds to every job of
the deployment, and why the figures of ``bin/bench`` fall as the processes grow for the same slots.

Uses the embedded server, or ``RECRUITER_TEST_MONGODB_URI``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import click
from pymongo import MongoClient

from bench.procs import cpu_seconds
from bench.server import running_server
from bench.stream_filter import Listener, cell, median_of, register, write_job
from recruiter.domain.lanes import lane_ids
from recruiter.store.wakeup import watch_pipeline


def _one_run(uri: str, pid: int | None, processes: list[list[str]], streams: int, jobs: int) -> dict[str, Any]:
    client: MongoClient[Any] = MongoClient(uri)
    db = client.get_default_database()
    listeners = [Listener(uri, watch_pipeline(ids)) for ids in processes[:streams]]
    for listener in listeners:
        listener.start()
    time.sleep(0.2)  # every stream in its first wait: a run counts only what its writes cause
    empty0 = sum(x.empty for x in listeners)
    entries = [i for ids in processes for i in ids]
    watched = {i for ids in processes[:streams] for i in ids}
    expected: Counter[str] = Counter()
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    for n in range(jobs):
        entry = entries[n % len(entries)]
        write_job(db, entry, n)
        if entry in watched:
            expected[entry] += 1
    deadline = time.monotonic() + 120
    while sum(sum(x.heard.values()) for x in listeners) < sum(expected.values()) and time.monotonic() < deadline:
        time.sleep(0.01)
    wall, cpu1 = time.perf_counter() - t0, cpu_seconds(pid)
    empty = sum(x.empty for x in listeners) - empty0
    for listener in listeners:
        listener.close()
    heard: Counter[str] = Counter()
    for listener in listeners:
        heard.update(listener.heard)
    if heard != expected:
        raise SystemExit(f"bench: {streams} streams heard {sum(heard.values())} assignments, "
                         f"not the {sum(expected.values())} of their entries")
    client.close()
    writes = 2 * jobs
    return {"streams": streams, "wall_ms_per_write": 1000 * wall / writes, "empty_per_write": empty / writes,
            "server_cpu_ms_per_write": None if cpu0 is None or cpu1 is None else 1000 * (cpu1 - cpu0) / writes}


def _counts(text: str) -> list[int]:
    try:
        counts = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of numbers") from None
    if not counts or counts[0] < 0:
        raise click.BadParameter(f"{text!r}: stream counts are numbers of 0 or more")
    return counts


@click.command()
@click.option("--streams", "streams_text", default="0,1,2,4,8,16", show_default=True,
              help="Stream counts, comma-separated.")
@click.option("--jobs", default=300, show_default=True, type=click.IntRange(1), help="Jobs per run.")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1))
def main(streams_text: str, jobs: int, rounds: int) -> None:
    counts = _counts(streams_text)
    with running_server() as server:
        uri = server.database_uri("bench_stream_count")
        client: MongoClient[Any] = MongoClient(uri)
        client.drop_database("bench_stream_count")
        # One process of one slot (two lanes) per stream; with fewer streams, the others' entries are written unheard.
        processes = [lane_ids(f"w{p:02d}", 1) for p in range(max(max(counts), 1))]
        register(client.get_default_database(), processes)
        runs: dict[int, list[dict[str, Any]]] = {n: [] for n in counts}
        for _ in range(rounds):
            for n in counts:
                runs[n].append(_one_run(uri, server.pid, processes, n, jobs))
        client.drop_database("bench_stream_count")
        client.close()
        print(f"server: {server.description}; {jobs} jobs a run (an assignment and an outcome each, "
              f"over {len(processes)} processes' entries), median of {rounds} rounds")
        base = median_of(runs[counts[0]], "server_cpu_ms_per_write")
        print(f"{'streams':>8}{'server CPU ms/write':>21}{'x first':>9}{'empty replies/write':>21}"
              f"{'wall ms/write':>15}")
        for n in counts:
            cpu = median_of(runs[n], "server_cpu_ms_per_write")
            ratio = "-" if not base or cpu is None else f"{cpu / base:.2f}x"
            print(f"{n:>8}{cell(cpu):>21}{ratio:>9}{cell(median_of(runs[n], 'empty_per_write')):>21}"
                  f"{cell(median_of(runs[n], 'wall_ms_per_write')):>15}")
        print(json.dumps({"runs": {str(n): r for n, r in runs.items()}}))


if __name__ == "__main__":
    main()
