"""A fan-in beside a plain batch of the same size: what waiting for N jobs costs (issue 42).

``python -m bench.fan_in [--parts 10000] [--processes 4] [--slots 16] [--quick]`` (or
``bin/bench --fan-in ...``) runs, each on a fresh embedded server with a recruiter, a cleaner and
``--processes`` worker processes of ``--slots`` slots (``--prefetch 1``):

- ``fan-in``: ``--parts`` no-op jobs and one more waiting for them all (``.after(*parts)``);
- ``plain``: the same jobs without the one that waits.

Both are written while their group is paused (batches of 1 000, then the dependent), so each
starts from the same stored state: every part queued, the dependent waiting for all of them.

For each: the parts' jobs/s (from the first part's start to the last part's archive, server
times), the recruiter's write commands and documents written per part, and the release's writes
per part: its updates of ``scheduled`` by ``findAndModify`` (the dependent's count down, one per
dependent per round) and its deletes of ``dependency_edges`` (one per round: a fan-in of more than
100 parts is stored with edges, :mod:`recruiter.domain.edges`), from the command counts every
process keeps (:mod:`recruiter.store.monitoring`, as :mod:`bench.write_counts` reads them); for
the fan-in, the time from the last part's archive to the dependent's start, and the dependent's
own enqueue. Then fan-in over plain: jobs/s and writes per part.

On a shared machine the absolute figures move with its load; the ratios of one run are what count.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from bench.jobs import GROUP, Noop
from bench.procs import REPO, describe_code
from bench.scenario import QUICK, Design, scenario
from bench.server import running_server
from bench.stats import difference

SERIES = ("fan-in", "plain")
RELEASE_WRITE = "findAndModify:scheduled"
EDGE_DELETE = "delete:dependency_edges"
# Parts per batch written: one transaction of 10 000 jobs outlives the embedded server's transaction
# limit on a loaded machine; the dependent is enqueued after its parts, all still queued (paused).
CHUNK = 1_000


def _span_s(observer: Any, parts: list[Any]) -> tuple[float, Any]:
    """Seconds from the first part's start to the last part's archive, and that archive's time."""
    first, last = None, None
    for d in observer["archived"].find({"_id": {"$in": parts}}, {"archived_at": 1, "last_execution.started_at": 1}):
        started = (d.get("last_execution") or {}).get("started_at") or d["archived_at"]
        first = started if first is None or started < first else first
        last = d["archived_at"] if last is None or d["archived_at"] > last else last
    if first is None or last is None:
        raise RuntimeError("no part archived")
    return max((last - first).total_seconds(), 1e-6), last


def run_series(name: str, parts: int, processes: int, slots: int, work_dir: Path, timeout_s: float) -> dict[str, Any]:
    design = Design("recruiter", 1, slots_per_process=slots)
    with running_server() as server, scenario(server, design, processes * slots, QUICK, work_dir) as s:
        rec = s.producer.rec
        # The group paused while the jobs are written (the clock of jobs/s starts at the first part's start).
        rec.admin.pause("group", [GROUP], force=True)
        before = s.flush()
        t0 = time.perf_counter()
        jobs = [j for k in range(0, parts, CHUNK)
                for j in rec.enqueue_many(Noop() for _ in range(min(CHUNK, parts - k)))]
        t1 = time.perf_counter()
        if name == "fan-in":
            jobs.append(Noop().as_job_of(rec).after(*jobs).enqueue())
        enqueue_s, dependent_s = time.perf_counter() - t0, time.perf_counter() - t1
        rec.admin.resume("group", [GROUP])
        s.wait(lambda: s.archived() >= len(jobs), timeout_s, f"{name}: {len(jobs)} jobs archived", interval_s=0.5)
        delta = {k: difference(v, before.get(k, v)) for k, v in s.flush().items()}
        span_s, last = _span_s(s.observer, jobs[:parts])
        recruiter = delta["recruiter"]
        release = (recruiter.get("targets") or {}).get(RELEASE_WRITE) or {}
        edges = (recruiter.get("targets") or {}).get(EDGE_DELETE) or {}
        out: dict[str, Any] = {
            "parts": parts, "enqueue_s": enqueue_s, "jobs_per_s": parts / span_s,
            "recruiter_writes_per_part": recruiter["writes"] / parts,
            "recruiter_documents_written_per_part": recruiter["written"] / parts,
            "release_writes_per_part": release.get("count", 0) / parts,
            "edge_deletes_per_part": edges.get("count", 0) / parts,
            "edges_deleted_per_part": edges.get("deleted", 0) / parts}
        if name == "fan-in":
            final = s.observer["archived"].find_one({"_id": jobs[-1]})
            if final is None or final["why"] != "done":
                raise RuntimeError(f"the dependent did not end done: {final}")
            out["release_latency_s"] = (final["last_execution"]["started_at"] - last).total_seconds()
            out["dependent_enqueue_s"] = dependent_s
        return out


def ratios(results: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    plain, fan = results.get("plain") or {}, results.get("fan-in") or {}

    def ratio(key: str) -> float | None:
        a, b = fan.get(key), plain.get(key)
        return None if a is None or not b else a / b

    return {"jobs_per_s": ratio("jobs_per_s"), "recruiter_writes_per_part": ratio("recruiter_writes_per_part")}


def show(results: dict[str, dict[str, Any]]) -> None:
    for name, f in results.items():
        print(f"  {name:7} {f['parts']} parts: {f['jobs_per_s']:.1f} jobs/s (enqueued in {f['enqueue_s']:.1f} s); "
              f"recruiter per part: {f['recruiter_writes_per_part']:.3f} write commands, "
              f"{f['recruiter_documents_written_per_part']:.3f} documents written, "
              f"{f['release_writes_per_part']:.4f} release writes ({RELEASE_WRITE}), "
              f"{f['edge_deletes_per_part']:.4f} edge deletes ({EDGE_DELETE}, "
              f"{f['edges_deleted_per_part']:.3f} edges)"
              + (f"; last part archived to dependent started: {f['release_latency_s']:.2f} s; "
                 f"the dependent enqueued in {f['dependent_enqueue_s']:.1f} s" if "release_latency_s" in f else ""))
    r = ratios(results)
    cells = {k: "-" if v is None else f"{v:.2f}x" for k, v in r.items()}
    print(f"  fan-in over plain: jobs/s {cells['jobs_per_s']}, recruiter write commands per part "
          f"{cells['recruiter_writes_per_part']}")


@click.command()
@click.option("--parts", type=click.IntRange(1, 10_000), default=10_000, show_default=True,
              help="Jobs of the batch (and parts of the fan-in).")
@click.option("--processes", type=click.IntRange(1), default=4, show_default=True, help="Worker processes.")
@click.option("--slots", type=click.IntRange(1), default=16, show_default=True,
              help="Slots per worker process (--concurrency).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(1), default=3600, show_default=True,
              help="Seconds each series may take once enqueued.")
@click.option("--quick", is_flag=True, help="50 parts, one process of 4 slots (a smoke run, not a measure).")
def main(parts: int, processes: int, slots: int, timeout_s: float, quick: bool) -> None:
    if quick:
        parts, processes, slots = 50, 1, 4
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="recruiter-fan-in-") as tmp:
        for name in SERIES:
            # A directory of its own per series: the scenario takes a process for started once its
            # stats file exists, and a file the last series left would let it signal one still starting.
            (Path(tmp) / name).mkdir()
            results[name] = run_series(name, parts, processes, slots, Path(tmp) / name, timeout_s)
            print(json.dumps({"series": name, **results[name]}), flush=True)
    print(f"fan-in ({describe_code(REPO)}), each series on a fresh embedded server, {processes}x{slots} slots; "
          "figures from a shared, loaded machine: compare the ratios of one run")
    show(results)
    print(json.dumps({"results": results, "ratios": ratios(results)}))


if __name__ == "__main__":
    main()
