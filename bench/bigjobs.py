"""Start latency by job size: does a 1 MiB job start as fast as a 1 KiB one?

    .venv/bin/python -m bench.bigjobs [--target URI] [--sizes 1KiB,100KiB,1MiB] [--samples 10]

Starts the real processes (a recruiter and one worker with its default
``--wake``) on a fresh database, then enqueues jobs one at a time, the sizes
taking turns (1 KiB, 100 KiB, 1 MiB, 1 KiB, ...) so that every size meets the
same conditions, each after the previous one was archived and a short idle
gap. For each job it takes, from the archived document:

- enqueue to start: ``last_execution.started_at - scheduled_at`` (the producer
  and the worker both set their clocks by the server's);
- queued to start: ``started_at`` minus the producer's clock when ``enqueue``
  returned (storing the job, which grows with its size, left out);
- assignment to start: ``started_at - assigned_at`` (the round's writes, the
  wake-up and the worker's part).

It prints the medians per size and their ratio to the smallest size's, and
whether the largest size starts within 2x of the smallest (issue 9). Without
``--target`` (or ``RECRUITER_TEST_MONGODB_URI``) it starts the embedded server.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from bench.jobs import GROUP, Payload
from bench.procs import REPO, Fleet
from bench.server import running_server
from bench.stats import percentile
from recruiter.domain.sizes import parse_size
from recruiter.producer.client import Recruiter
from recruiter.store.clock import ServerClock
from recruiter.store.connection import parse_target, sync_client, with_database
from recruiter.store.indexes import ensure_indexes_sync

TARGET_RATIO = 2.0
IDLE_GAP_S = (0.3, 0.6)
TIMEOUT_S = 60.0
KINDS = ("enqueue_ms", "queued_ms", "assign_ms")


def wait(condition: Callable[[], Any], fleet: Fleet, what: str) -> Any:
    deadline = time.monotonic() + TIMEOUT_S
    while not (value := condition()):
        fleet.check_alive()
        if time.monotonic() > deadline:
            raise SystemExit(f"bench.bigjobs: timed out after {TIMEOUT_S:.0f}s waiting for {what}")
        time.sleep(0.01)
    return value


def sample(rec: Recruiter, archived: Any, fleet: Fleet, size: int) -> dict[str, float]:
    """Enqueue one job with a ``size``-byte parameter; its latencies in ms (see the module doc)."""
    job_id = rec.enqueue(Payload("x" * size))
    queued_at = rec.clock.now()
    doc = wait(lambda: archived.find_one({"_id": job_id}, {"scheduled_at": 1, "last_execution": 1, "why": 1}),
               fleet, f"a {size}-byte job to be archived")
    if doc.get("why") != "done":
        raise SystemExit(f"bench.bigjobs: a {size}-byte job was archived {doc.get('why')!r}, not 'done'")
    execution = doc["last_execution"]
    started = execution["started_at"]
    return {"enqueue_ms": (started - doc["scheduled_at"]).total_seconds() * 1000,
            "queued_ms": (started - queued_at).total_seconds() * 1000,
            "assign_ms": (started - execution["assigned_at"]).total_seconds() * 1000}


def measure(uri: str, sizes: list[int], samples: int, work_dir: Path) -> dict[int, dict[str, list[float]]]:
    fleet = Fleet(uri, work_dir)
    client: MongoClient[Any] = sync_client(parse_target(uri), app_name="bench-bigjobs")
    try:
        clock = ServerClock()
        clock.calibrate_sync(client)
        rec = Recruiter(client, client.get_default_database().name, clock=clock)
        ensure_indexes_sync(rec.db)
        fleet.product("recruiter", "start")
        fleet.product("worker", "worker", "start", "--group", GROUP, "--import-path", str(REPO))
        wait(lambda: rec.db.roster.count_documents({"available": True}), fleet, "the worker to register")
        out: dict[int, dict[str, list[float]]] = {s: {k: [] for k in KINDS} for s in sizes}
        for size in sizes:  # warm-up: imports, connections, first documents of each size
            sample(rec, rec.db.archived, fleet, size)
        for _ in range(samples):
            for size in sizes:
                time.sleep(random.uniform(*IDLE_GAP_S))
                for kind, value in sample(rec, rec.db.archived, fleet, size).items():
                    out[size][kind].append(value)
        return out
    finally:
        fleet.stop()
        client.drop_database(client.get_default_database().name)
        client.close()


def p(values: list[float], q: float) -> float:
    value = percentile(values, q)
    assert value is not None, "no samples"
    return value


def human(size: int) -> str:
    for unit, factor in (("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} B"


def report(results: dict[int, dict[str, list[float]]]) -> bool:
    """Print the table; True if the largest size starts within TARGET_RATIO of the smallest."""
    sizes = sorted(results)
    base = {k: p(results[sizes[0]][k], 50) for k in KINDS}
    print(f"{'parameter':>10} {'samples':>8} {'enqueue->start p50':>19} {'p95':>8} {'ratio':>6} "
          f"{'queued->start p50':>18} {'ratio':>6} {'assign->start p50':>18}")
    for size in sizes:
        r = results[size]
        print(f"{human(size):>10} {len(r['enqueue_ms']):>8} {p(r['enqueue_ms'], 50):>16.1f} ms "
              f"{p(r['enqueue_ms'], 95):>5.1f} ms {p(r['enqueue_ms'], 50) / base['enqueue_ms']:>5.2f}x "
              f"{p(r['queued_ms'], 50):>15.1f} ms {p(r['queued_ms'], 50) / base['queued_ms']:>5.2f}x "
              f"{p(r['assign_ms'], 50):>15.1f} ms")
    ratio = p(results[sizes[-1]]["enqueue_ms"], 50) / base["enqueue_ms"]
    met = ratio <= TARGET_RATIO
    print(f"target: a {human(sizes[-1])} job starts within {TARGET_RATIO:g}x of a {human(sizes[0])} job "
          f"(median enqueue->start): {ratio:.2f}x, {'met' if met else 'NOT met'}")
    return met


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default=os.environ.get("RECRUITER_TEST_MONGODB_URI"))
    parser.add_argument("--sizes", default="1KiB,100KiB,1MiB", help="parameter sizes, comma-separated")
    parser.add_argument("--samples", type=int, default=10, help="jobs per size")
    args = parser.parse_args()
    sizes = sorted(parse_size(s) for s in args.sizes.split(",") if s.strip())
    if not sizes or args.samples < 1:
        parser.error("need at least one size and one sample")
    os.environ.pop("RECRUITER_COMMAND_STATS", None)
    with ExitStack() as stack:
        uri = args.target or stack.enter_context(running_server()).uri
        work_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-bigjobs-")))
        database_uri = with_database(uri, f"bench_bigjobs_{uuid.uuid4().hex[:12]}")
        print(f"start latency by job size: one recruiter, one worker (default --wake), {args.samples} jobs per size, "
              f"sizes taking turns")
        report(measure(database_uri, sizes, args.samples, work_dir))


if __name__ == "__main__":
    main()
