"""Turning a benchmark result document into the table, the targets of issue 5 and a plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROUND_TRIP_FLOOR = 2.0  # the enqueue and the outcome: two durable writes per job (DESIGN §8)


def _get(doc: Any, *path: Any) -> Any:
    for key in path:
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    return doc


def _ratio(value: float | None, reference: float | None) -> float | None:
    if value is None or not reference:
        return None
    return value / reference


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def product_designs(doc: dict[str, Any]) -> list[str]:
    return [name for name in doc["results"] if name != "v1"]


def main_product_design(doc: dict[str, Any]) -> str | None:
    """The design the throughput targets are judged on: change streams when the product has them."""
    names = product_designs(doc)
    for preferred in ("recruiter-change-stream", "recruiter"):
        if preferred in names:
            return preferred
    return names[0] if names else None


def table(doc: dict[str, Any]) -> str:
    ref = doc["reference"]
    ceiling = ref["raw"]["job_life_ceiling_per_s"]
    notify = ref["notification"]["p50_ms"]
    raw = ", ".join(f"{k} {v:.0f}/s" for k, v in ref["raw"]["ops_per_s"].items())
    lines = [
        f"server: {doc['meta']['server']}; machine: {doc['meta']['machine']['cpus']} CPUs, "
        f"{doc['meta']['machine']['cpu']}",
        f"reference: raw single-document ops ({raw}); job-life ceiling {ceiling:.0f} jobs/s "
        f"({ref['raw']['job_life_ceiling']}); change notification p50 {notify:.1f} ms, "
        f"p95 {ref['notification']['p95_ms']:.1f} ms",
        "",
    ]
    header = ["design", "W", "noop/s", "xceil", "100ms/s", "xW*10", "p50 ms", "p95", "p99", "xnotify",
              "rt/job", "xfloor", "wkr r/w", "B/job", "idle rq/s", "RSS MiB"]
    rows = [header]
    for design, by_count in doc["results"].items():
        for n, r in by_count.items():
            workers = int(n)
            noop = r["noop"]["jobs_per_s"]
            sleep = r["sleep100"]["jobs_per_s"]
            steady_worker = _get(r, "noop", "steady", "worker_path")
            all_per_job = r["noop"]["per_job"]["all"]
            rss = r["memory"]["worker_rss_kib"]
            rows.append([
                design, n, _fmt(noop), _fmt(_ratio(noop, ceiling), 2),
                _fmt(sleep), _fmt(_ratio(sleep, workers * 10), 2),
                _fmt(r["latency"]["p50_ms"]), _fmt(r["latency"]["p95_ms"]), _fmt(r["latency"]["p99_ms"]),
                _fmt(_ratio(r["latency"]["p50_ms"], notify)),
                _fmt(all_per_job["round_trips"], 2), _fmt(_ratio(all_per_job["round_trips"], ROUND_TRIP_FLOOR), 2),
                (f"{steady_worker['reads']:.2f}/{steady_worker['writes']:.2f}" if steady_worker else "-"),
                _fmt(all_per_job["request_bytes"] + all_per_job["reply_bytes"], 0),
                _fmt(r["idle"]["worker_requests_per_s"], 2), _fmt(rss / 1024 if rss else None),
            ])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines += ["  ".join(cell.rjust(w) if i > 0 else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths,
                                                                                                   strict=True)))
              for row in rows]
    lines += [
        "",
        "noop/s, 100ms/s: jobs archived per second, first enqueue to last archived; xceil: / job-life ceiling; "
        "xW*10: / (workers x 10 jobs/s)",
        "p50/p95/p99: ready-to-start latency with idle workers (started_at - scheduled_at); xnotify: p50 / the "
        "server's change-notification p50",
        "rt/job: round trips per no-op job, all processes, whole phase; xfloor: / 2 (enqueue + outcome); "
        "wkr r/w: worker reads/writes per job, steady state, idle polls (reads that found nothing) and "
        "heartbeats left out; B/job: request+reply bytes per job, all processes",
        "idle rq/s: requests per second of one idle worker process; RSS: one worker process after the run",
    ]
    return "\n".join(lines)


def _target(name: str, design: str | None, workers: int | None, measured: float | None, limit: float,
            higher_is_better: bool = False, note: str = "") -> dict[str, Any]:
    ratio = _ratio(measured, limit)
    met = None if ratio is None else (ratio >= 1 if higher_is_better else ratio <= 1)
    return {"target": name, "design": design, "workers": workers, "measured": measured, "limit": limit,
            "ratio": ratio, "met": met, "note": note}


def _largest(by_count: dict[str, Any], at_most: int | None = None) -> int | None:
    counts = [int(n) for n in by_count if at_most is None or int(n) <= at_most]
    return max(counts) if counts else None


def targets(doc: dict[str, Any], *, heartbeat_s: float, poll_to_s: float) -> list[dict[str, Any]]:
    results = doc["results"]
    out: list[dict[str, Any]] = []
    main = main_product_design(doc)
    if main is None:
        return out
    by_count = results[main]
    top = _largest(by_count)
    note_top = "" if top == 16 else f"measured at {top} workers, the most in this run"
    r = by_count[str(top)]
    steady = _get(r, "noop", "steady", "worker_path")
    note = "steady-state window of the no-op batch; empty polls and heartbeats left out"
    out.append(_target("worker path: writes per job <= 1", main, top, steady and steady["writes"], 1.0,
                       note=note))
    out.append(_target("worker path: reads per job <= 2", main, top, steady and steady["reads"], 2.0, note=note))
    out.append(_target("whole system, batched enqueue: round trips per job <= 2.5", main, top,
                       r["noop"]["per_job"]["all"]["round_trips"], 2.5, note=note_top))
    out.append(_target("assigned_to bytes per job < 400", main, top, _get(r, "noop", "assigned_to_bytes", "mean"),
                       400.0, note="BSON size of the assigned_to map in an assigned roster document (sampled)"))
    notify = doc["reference"]["notification"]["p50_ms"]
    for design in product_designs(doc):
        wake = design.removeprefix("recruiter-") if design != "recruiter" else "poll (the only mode)"
        worst = max((v["latency"]["p50_ms"] for v in results[design].values() if v["latency"]["p50_ms"] is not None),
                    default=None)
        out.append(_target(f"latency p50 <= 2x change notification ({wake})", design, None, worst, 2 * notify,
                           note=f"worst p50 over worker counts; notification p50 {notify:.1f} ms"))
        # The mean over worker counts: a window of a few seconds holds one heartbeat or two.
        idles = [v["idle"]["worker_requests_per_s"] for v in results[design].values()]
        idle = sum(idles) / len(idles)
        if design == "recruiter-change-stream":
            out.append(_target("idle worker <= 1 request/s (change streams)", design, None, idle, 1.0,
                               note="mean over worker counts"))
        else:
            limit = 1 / poll_to_s + 1 / heartbeat_s
            out.append(_target("idle worker <= poll backoff (1/poll-to + 1/heartbeat)", design, None, idle, limit,
                               note=f"mean over worker counts; poll-to {poll_to_s}s, heartbeat {heartbeat_s}s"))
    if "v1" in results and str(top) in results["v1"]:
        ours = r["noop"]["jobs_per_s"]
        theirs = results["v1"][str(top)]["noop"]["jobs_per_s"]
        out.append(_target("no-op throughput >= 3x v1", main, top, ours / theirs, 3.0, higher_is_better=True,
                           note=f"{ours:.1f} vs v1 {theirs:.1f} jobs/s; {note_top}".rstrip("; ")))
    k = _largest(by_count, at_most=8)
    if "1" in by_count and k is not None and k > 1:
        one = by_count["1"]["sleep100"]["jobs_per_s"]
        at_k = by_count[str(k)]["sleep100"]["jobs_per_s"]
        out.append(_target(f"100 ms jobs: throughput({k}) >= 0.8 x {k} x throughput(1)", main, k, at_k,
                           0.8 * k * one, higher_is_better=True, note=f"throughput(1) = {one:.2f} jobs/s"))
    return out


def target_table(rows: list[dict[str, Any]]) -> str:
    lines = ["", "targets of issue 5 (none is a timed test):"]
    for t in rows:
        status = {True: "met", False: "MISSED", None: "not measured"}[t["met"]]
        at = f" @{t['workers']}W" if t["workers"] else ""
        lines.append(f"  [{status:>12}] {t['target']} — {t['design']}{at}: measured {_fmt(t['measured'], 2)}, "
                     f"limit {_fmt(t['limit'], 2)}, ratio {_fmt(t['ratio'], 2)}"
                     + (f" ({t['note']})" if t["note"] else ""))
    return "\n".join(lines)


def plot(doc: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    for design, by_count in doc["results"].items():
        counts = sorted(int(n) for n in by_count)
        noop = [by_count[str(n)]["noop"]["jobs_per_s"] for n in counts]
        sleep = [by_count[str(n)]["sleep100"]["jobs_per_s"] for n in counts]
        p50 = [by_count[str(n)]["latency"]["p50_ms"] for n in counts]
        p95 = [by_count[str(n)]["latency"]["p95_ms"] for n in counts]
        (line,) = left.plot(counts, noop, marker="o", label=f"{design}: no-op")
        left.plot(counts, sleep, marker="s", linestyle="--", color=line.get_color(), label=f"{design}: 100 ms")
        right.plot(counts, p50, marker="o", color=line.get_color(), label=f"{design}: p50")
        right.plot(counts, p95, marker="v", linestyle=":", color=line.get_color(), label=f"{design}: p95")
    notify = doc["reference"]["notification"]["p50_ms"]
    right.axhline(notify, color="grey", linewidth=1, label=f"server change notification p50 ({notify:.1f} ms)")
    left.set(title="Throughput", xlabel="workers", ylabel="jobs/s", xscale="log")
    right.set(title="Ready-to-start latency, idle workers", xlabel="workers", ylabel="ms", xscale="log",
              yscale="log")
    for ax in (left, right):
        counts = sorted({int(n) for by_count in doc["results"].values() for n in by_count})
        ax.set_xticks(counts, [str(c) for c in counts])
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"recruiter vs v1 on {doc['meta']['server']} ({doc['meta']['machine']['cpus']} CPUs)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
