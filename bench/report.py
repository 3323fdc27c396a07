"""Turning a benchmark result document into the table, the targets of issue 14 and a plot.

``python -m bench.report docs/bench.json`` prints docs/benchmarks.md's tables (markdown)
from a result document, so those tables can be regenerated from the committed JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ISSUE = "issue 14"
TARGET_COUNTS = (1, 2, 4, 8, 16)
IDEAL_FRACTION = {8: 0.9, 16: 0.8}  # 100 ms jobs: of W x 10 jobs/s
ROUND_TRIPS_AT_16 = 2.0
LATENCY_X_NOTIFY = 4.0


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
    """The design the targets are judged on: the product's default (``recruiter``, look-ahead 1)."""
    names = product_designs(doc)
    for preferred in ("recruiter", "recruiter-prefetch0"):
        if preferred in names:
            return preferred
    return names[0] if names else None


def round_trips(r: dict[str, Any]) -> tuple[float | None, float | None]:
    """Round trips per no-op job in the steady window, all processes: counting the server's empty
    ``getMore`` replies, and without them."""
    all_ = _get(r, "noop", "per_job", "all")
    if not all_:
        return None, None
    return all_["round_trips"], all_["round_trips"] - all_["empty_getmores"]


def rows(doc: dict[str, Any]) -> list[list[str]]:
    notify = doc["reference"]["notification"]["p50_ms"]
    v1 = doc["results"].get("v1", {})
    header = ["design", "W", "noop/s", "xv1", "100ms/s", "xideal", "p50 ms", "p95", "xnotify", "rt/job",
              "rt w/o empty", "wkr r/w", "idle rq/s", "RSS MiB"]
    out = [header]
    per_process = {d["name"]: d.get("slots_per_process", 1) for d in doc.get("meta", {}).get("designs", [])}
    for design, by_count in doc["results"].items():
        label = design if per_process.get(design, 1) <= 1 else f"{design} ({per_process[design]}/process)"
        for n, r in by_count.items():
            noop = r["noop"]["jobs_per_s"]
            sleep = r["sleep100"]["jobs_per_s"]
            path = r["noop"].get("worker_path")
            rt, rt_net = round_trips(r)
            rss = r["memory"]["worker_rss_kib"]
            out.append([
                label, n, _fmt(noop), _fmt(_ratio(noop, _get(v1, n, "noop", "jobs_per_s")), 2),
                _fmt(sleep), _fmt(_ratio(sleep, int(n) * 10), 2),
                _fmt(r["latency"]["p50_ms"]), _fmt(r["latency"]["p95_ms"]),
                _fmt(_ratio(r["latency"]["p50_ms"], notify)), _fmt(rt, 2), _fmt(rt_net, 2),
                f"{path['reads']:.2f}/{path['writes']:.2f}" if path else "-",
                _fmt(r["idle"]["worker_requests_per_s"], 2), _fmt(rss / 1024 if rss else None),
            ])
    return out


LEGEND = [
    "noop/s, 100ms/s: jobs archived per second inside a steady window (backlog kept non-empty, after a warm-up); "
    "xv1: / v1's no-op rate at the same W; xideal: / (W x 10 jobs/s)",
    "p50/p95: ready-to-start latency with idle workers (started_at - scheduled_at); xnotify: p50 / the server's "
    "change-notification p50",
    "rt/job: round trips per no-op job in the window, all processes (enqueue included); rt w/o empty: without the "
    "server's empty getMore replies (change streams woken by writes that are not theirs)",
    "wkr r/w: worker reads/writes per no-op job, idle polls and heartbeats left out; idle rq/s: requests per second "
    "of one idle worker process; RSS: one worker process",
    "W: workers (slots); one process each, or N to a process (--concurrency N) where the design says 'N/process'",
]


def table(doc: dict[str, Any]) -> str:
    ref = doc["reference"]
    raw = ", ".join(f"{k} {v:.0f}/s" for k, v in ref["raw"]["ops_per_s"].items())
    lines = [
        f"server: {doc['meta']['server']}; machine: {doc['meta']['machine']['cpus']} CPUs, "
        f"{doc['meta']['machine']['cpu']}",
        f"reference: raw single-document ops ({raw}); change notification p50 {ref['notification']['p50_ms']:.1f} ms, "
        f"p95 {ref['notification']['p95_ms']:.1f} ms",
        "",
    ]
    table_rows = rows(doc)
    widths = [max(len(row[i]) for row in table_rows) for i in range(len(table_rows[0]))]
    lines += ["  ".join(cell.rjust(w) if i > 0 else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths,
                                                                                                   strict=True)))
              for row in table_rows]
    return "\n".join([*lines, "", *LEGEND])


def _target(name: str, design: str | None, workers: int | None, measured: float | None, limit: float,
            higher_is_better: bool = False, note: str = "") -> dict[str, Any]:
    met = None if measured is None else (measured >= limit if higher_is_better else measured <= limit)
    return {"target": name, "design": design, "workers": workers, "measured": measured, "limit": limit,
            "met": met, "note": note}


def targets(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets of issue 14, judged on the product's default design, one line each."""
    main = main_product_design(doc)
    if main is None:
        return []
    ours, v1 = doc["results"][main], doc["results"].get("v1", {})
    out = []
    for w in TARGET_COUNTS:
        mine, theirs = _get(ours, str(w), "noop", "jobs_per_s"), _get(v1, str(w), "noop", "jobs_per_s")
        out.append(_target(f"no-op throughput >= v1 at {w} worker(s)", main, w, _ratio(mine, theirs), 1.0, True,
                           note=f"{_fmt(mine)} vs v1 {_fmt(theirs)} jobs/s"))
    for w, fraction in IDEAL_FRACTION.items():
        rate = _get(ours, str(w), "sleep100", "jobs_per_s")
        out.append(_target(f"100 ms jobs >= {fraction} of ideal (W x 10 jobs/s) at {w} workers", main, w,
                           _ratio(rate, w * 10), fraction, True, note=f"{_fmt(rate)} jobs/s of {w * 10}"))
    rt, rt_net = round_trips(ours["16"]) if "16" in ours else (None, None)
    out.append(_target(f"round trips per job at 16 workers <= {ROUND_TRIPS_AT_16} (empty getMore replies apart)",
                       main, 16, rt_net, ROUND_TRIPS_AT_16,
                       note=f"{_fmt(rt, 2)} counting the server's empty getMore replies"))
    notify = doc["reference"]["notification"]["p50_ms"]
    p50s = {n: r["latency"]["p50_ms"] for n, r in ours.items() if r["latency"]["p50_ms"] is not None}
    worst = max(p50s.values(), default=None)
    out.append(_target(f"latency p50 with idle workers <= {LATENCY_X_NOTIFY:g}x the server's notification latency",
                       main, None, _ratio(worst, notify), LATENCY_X_NOTIFY,
                       note=f"worst p50 over worker counts, {_fmt(worst)} ms; notification p50 {notify:.1f} ms; "
                            "p50 by W: " + ", ".join(f"{n}: {_fmt(v)}" for n, v in p50s.items())))
    for design in product_designs(doc):
        paths = [r["noop"]["worker_path"] for r in doc["results"][design].values() if r["noop"].get("worker_path")]
        writes = max((p["writes"] for p in paths), default=None)
        reads = max((p["reads"] for p in paths), default=None)
        out.append(_target("worker path <= 1 write per job", design, None, writes, 1.0,
                           note="most over worker counts; idle polls and heartbeats left out"))
        out.append(_target("worker path <= 2 reads per job", design, None, reads, 2.0,
                           note="most over worker counts; idle polls and heartbeats left out"))
    return out


def target_table(rows_: list[dict[str, Any]]) -> str:
    lines = ["", f"targets of {ISSUE} (none is a timed test):"]
    for t in rows_:
        status = {True: "met", False: "MISSED", None: "not measured"}[t["met"]]
        at = f" @{t['workers']}W" if t["workers"] else ""
        lines.append(f"  [{status:>12}] {t['target']} — {t['design']}{at}: measured {_fmt(t['measured'], 2)}, "
                     f"limit {_fmt(t['limit'], 2)}" + (f" ({t['note']})" if t["note"] else ""))
    return "\n".join(lines)


def markdown(doc: dict[str, Any]) -> str:
    """docs/benchmarks.md's tables: the figures, the targets (met / missed), the capacity of one leader."""
    table_rows = rows(doc)
    lines = ["| " + " | ".join(table_rows[0]) + " |", "|" + "---|" * len(table_rows[0])]
    lines += ["| " + " | ".join(r) + " |" for r in table_rows[1:]]
    lines += ["", "| target | design | measured | limit | |", "|---|---|---|---|---|"]
    for t in doc.get("targets") or []:
        status = {True: "met", False: "**missed**", None: "not measured"}[t["met"]]
        lines.append(f"| {t['target']} | {t['design']} | {_fmt(t['measured'], 2)} ({t['note']}) | "
                     f"{_fmt(t['limit'], 2)} | {status} |")
    if doc.get("capacity"):
        from bench.capacity import table as capacity_table

        lines += ["", "```", capacity_table(doc["capacity"]).strip(), "```"]
    if doc.get("peers"):
        from bench.peers.table import markdown as peer_markdown

        lines += ["", peer_markdown(doc)]
    return "\n".join(lines)


def plot(doc: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(16, 4.8))
    counts_all = sorted({int(n) for by_count in doc["results"].values() for n in by_count})
    for design, by_count in doc["results"].items():
        counts = sorted(int(n) for n in by_count)
        (line,) = left.plot(counts, [by_count[str(n)]["noop"]["jobs_per_s"] for n in counts], marker="o",
                            label=design)
        color = line.get_color()
        middle.plot(counts, [by_count[str(n)]["sleep100"]["jobs_per_s"] for n in counts], marker="s", color=color,
                    label=design)
        right.plot(counts, [by_count[str(n)]["latency"]["p50_ms"] for n in counts], marker="o", color=color,
                   label=f"{design}: p50")
        right.plot(counts, [by_count[str(n)]["latency"]["p95_ms"] for n in counts], marker="v", linestyle=":",
                   color=color, label=f"{design}: p95")
    middle.plot(counts_all, [10 * n for n in counts_all], color="grey", linestyle="--", label="ideal (W x 10/s)")
    notify = doc["reference"]["notification"]["p50_ms"]
    right.axhline(notify, color="grey", linewidth=1, label=f"server notification p50 ({notify:.1f} ms)")
    right.axhline(LATENCY_X_NOTIFY * notify, color="grey", linewidth=1, linestyle="--",
                  label=f"target: {LATENCY_X_NOTIFY:g}x notification")
    left.set(title="No-op jobs, steady window", xlabel="workers", ylabel="jobs/s", xscale="log")
    middle.set(title="100 ms jobs, steady window", xlabel="workers", ylabel="jobs/s", xscale="log")
    right.set(title="Ready-to-start latency, idle workers", xlabel="workers", ylabel="ms", xscale="log",
              yscale="log")
    for ax in (left, middle):
        ax.set_ylim(bottom=0)
    for ax in (left, middle, right):
        ax.set_xticks(counts_all, [str(c) for c in counts_all])
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"recruiter (--prefetch 1, the default, and --prefetch 0) vs v1 on {doc['meta']['server']} "
                 f"({doc['meta']['machine']['cpus']} CPUs)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m bench.report RESULT.json   (prints docs/benchmarks.md's markdown tables)")
    print(markdown(json.loads(Path(sys.argv[1]).read_text())))
