"""What ``worker start --isolation process`` costs per job, beside the default threads.

    .venv/bin/python -m bench.isolation [--target URI] [--jobs 200] [--concurrency 2]

For each isolation (``thread``, then ``process``) and each job kind (no-op, 100 ms sleep),
starts a recruiter and one worker on a fresh database, enqueues ``--jobs`` jobs at once and
waits until all are archived. It prints, side by side with the ratio process/thread:

- the attempt's own time (``ended_at - started_at`` of each execution, median and p95):
  what isolation adds to every job (a fork from the forkserver, the job's import, the pipe);
- the throughput of the batch (jobs per second from the first start to the last end).

Without ``--target`` (or ``RECRUITER_TEST_MONGODB_URI``) it starts the embedded server.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.jobs import GROUP, Noop, Sleep100
from bench.procs import REPO, Fleet
from bench.server import running_server
from bench.stats import percentile
from recruiter.producer.client import Recruiter
from recruiter.store.connection import with_database

TIMEOUT_S = 300.0
KINDS = {"no-op": Noop, "100 ms": Sleep100}


def run_one(uri: str, isolation: str, kind: str, jobs: int, concurrency: int, work_dir: Path) -> dict[str, float]:
    """One batch under ``isolation``: per-job attempt time (ms) and the batch's throughput."""
    fleet = Fleet(uri, work_dir / f"{isolation}-{kind.replace(' ', '')}")
    fleet.work_dir.mkdir(parents=True)
    with Recruiter.connect(uri) as rec:
        try:
            fleet.product("recruiter", "start")
            fleet.product("worker", "worker", "start", "--group", GROUP, "--import-path", str(REPO),
                          "--isolation", isolation, "--concurrency", str(concurrency))
            deadline = time.monotonic() + TIMEOUT_S
            while rec.db.roster.count_documents({"available": True}) < concurrency:
                fleet.check_alive()
                if time.monotonic() > deadline:
                    raise SystemExit("bench.isolation: the worker did not register")
                time.sleep(0.05)
            rec.enqueue_many([KINDS[kind]() for _ in range(jobs)])
            while rec.db.archived.count_documents({}) < jobs:
                fleet.check_alive()
                if time.monotonic() > deadline:
                    raise SystemExit(f"bench.isolation: {jobs} jobs not archived in {TIMEOUT_S:.0f}s")
                time.sleep(0.1)
            executions = [d["last_execution"] for d in rec.db.archived.find({}, {"last_execution": 1})]
        finally:
            fleet.stop()
            rec.client.drop_database(rec.db.name)
    runs = [(e["ended_at"] - e["started_at"]).total_seconds() * 1000 for e in executions]
    span_s = (max(e["ended_at"] for e in executions) - min(e["started_at"] for e in executions)).total_seconds()
    return {"p50": _p(runs, 50), "p95": _p(runs, 95), "jobs_s": jobs / span_s if span_s else float("inf")}


def _p(values: list[float], q: float) -> float:
    value = percentile(values, q)
    assert value is not None
    return value


def report(results: dict[tuple[str, str], dict[str, float]]) -> None:
    print(f"{'job':>7} {'attempt p50 thread':>19} {'process':>9} {'+ per job':>10} {'p95 thread':>11} "
          f"{'process':>9} {'jobs/s thread':>14} {'process':>9} {'ratio':>6}")
    for kind in KINDS:
        t, p = results[("thread", kind)], results[("process", kind)]
        print(f"{kind:>7} {t['p50']:>16.1f} ms {p['p50']:>6.1f} ms {p['p50'] - t['p50']:>7.1f} ms "
              f"{t['p95']:>8.1f} ms {p['p95']:>6.1f} ms {t['jobs_s']:>14.1f} {p['jobs_s']:>9.1f} "
              f"{p['jobs_s'] / t['jobs_s']:>5.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default=os.environ.get("RECRUITER_TEST_MONGODB_URI"))
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()
    os.environ.pop("RECRUITER_COMMAND_STATS", None)
    results: dict[tuple[str, str], dict[str, Any]] = {}
    with ExitStack() as stack:
        uri = args.target or stack.enter_context(running_server()).uri
        work_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-isolation-")))
        print(f"--isolation thread vs process: {args.jobs} jobs per batch, one worker of concurrency "
              f"{args.concurrency}, one recruiter")
        for kind in KINDS:
            for isolation in ("thread", "process"):
                database = with_database(uri, f"bench_isolation_{uuid.uuid4().hex[:12]}")
                results[(isolation, kind)] = run_one(database, isolation, kind, args.jobs, args.concurrency, work_dir)
        report(results)


if __name__ == "__main__":
    main()
