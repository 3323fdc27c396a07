"""Round reads at several roster sizes (``bin/bench --round-reads``): what one recruiter round reads as the
roster grows while the work stays the same.

For each layout (processes x ``--concurrency``; default 2x25, 8x25 and 8x100 = 50,
200 and 800 slots), one after another on the same server, a fresh database gets one
recruiter, one cleaner and the layout's workers (:func:`bench.capacity.leader`, the
capacity mode's set-up). Once every slot has registered and the recruiter has run
a round, the bench enqueues no-op jobs at one fixed rate (``--round-reads-rate``,
well under capacity), at a steady pace: every tick enqueues the jobs due by then,
so no backlog builds up. After the
warm-up, over a window, it reports per committed round of the recruiter (its round
timings, ``RECRUITER_ROUND_STATS``): the round trips, the documents the server
returned to it (cursor replies) and the KiB it received, in all and per
``command:collection`` (all the recruiter's commands in the window, lease and
upkeep included, over its committed rounds); the jobs done per second; and each layout's figures over the
first layout's. The recruiter's reads of idle rounds (those that found nothing to
write) are in its commands too: the figures per round, idle ones included, are
given beside.

Invariant: every layout gets the same rate, warm-up and window; the figures of a
window are differences of two readings at its ends (:mod:`bench.steady`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from bench.capacity import Layout, leader, parse_layout, per_round, rounds_between, writes_line, writes_per_job
from bench.procs import REPO, describe_code
from bench.server import Server
from bench.stats import difference

POLL_S = 0.05
# What the ratios to the first layout compare (keys of a layout's "per_round", and jobs_per_s).
COMPARED = ("round_trips", "documents", "kib_received")


@dataclass(frozen=True)
class Plan:
    layouts: tuple[Layout, ...]
    rate: float  # jobs enqueued per second
    warm_up_s: float
    window_s: float


# 800 slots as 8 processes of 100: 32 processes of 25 overloaded a 2-core machine (workers taken for
# dead by the cleaner, before and after issue 26 alike), which measured the machine, not the round.
FULL = Plan((Layout(2, 25, 5.0, 30.0), Layout(8, 25, 5.0, 30.0), Layout(8, 100, 5.0, 30.0)), rate=20.0,
            warm_up_s=5.0, window_s=30.0)
QUICK = Plan((Layout(1, 2, 0.5, 2.0), Layout(2, 2, 0.5, 2.0)), rate=5.0, warm_up_s=0.5, window_s=2.0)


def parse_layouts(value: str) -> tuple[Layout, ...]:
    """``PxC,PxC,...`` (processes x concurrency each)."""
    layouts = []
    for part in (v for v in value.split(",") if v.strip()):
        try:
            layout = parse_layout(part, QUICK.layouts[0])
        except click.BadParameter as exc:
            exc.param_hint = "--round-reads-layouts"
            raise
        if layout is None:
            raise click.BadParameter("'none' is not a layout of the round-reads series",
                                     param_hint="--round-reads-layouts")
        layouts.append(layout)
    if not layouts:
        raise click.BadParameter(f"{value!r} names no layout (e.g. 2x25,8x25,8x100)",
                                 param_hint="--round-reads-layouts")
    return tuple(layouts)


class _Pace:
    """Enqueues ``rate`` jobs per second, at an even pace: each tick the jobs due by then."""

    def __init__(self, rate: float, enqueue: Callable[[int], None]) -> None:
        self.rate, self.enqueue_many = rate, enqueue
        self.began = time.perf_counter()
        self.enqueued = 0

    def tick(self) -> None:
        due = int(self.rate * (time.perf_counter() - self.began)) - self.enqueued
        if due > 0:
            self.enqueue_many(due)
            self.enqueued += due


def run_layout(server: Server, layout: Layout, plan: Plan, work_dir: Path, prefetch_args: list[str],
               recruiter_args: tuple[str, ...] = (), code: Path = REPO) -> dict[str, Any]:
    """One layout at the plan's rate, its processes running the code of checkout ``code``: its
    figures per committed round (see the module doc)."""
    with leader(server, layout, work_dir, prefetch_args, recruiter_args, code) as lead:
        pace = _Pace(plan.rate, lead.enqueue)

        def run_for(seconds: float) -> None:
            began = time.perf_counter()
            while time.perf_counter() - began < seconds:
                pace.tick()
                lead.fleet.check_alive()
                time.sleep(POLL_S)

        run_for(plan.warm_up_s)
        a0, s0, r0, t0 = lead.archived(), lead.flush(), lead.rounds(), time.perf_counter()
        run_for(plan.window_s)
        a1, s1, r1, t1 = lead.archived(), lead.flush(), lead.rounds(), time.perf_counter()
        phase = {k: difference(s1[k], s0.get(k, s1[k])) for k in s1}
        recruiter = phase["recruiter"]
        rounds = rounds_between(r0, r1)
        seconds = t1 - t0
        committed = per_round(recruiter, rounds["rounds"])
        every = per_round(recruiter, rounds["rounds"] + rounds["idle_rounds"])
        for figures in (committed, every):
            if figures:
                figures["kib_received"] = figures["reply_bytes"] / 1024
        return {"processes": layout.processes, "concurrency": layout.concurrency, "slots": layout.slots,
                "lanes": lead.lanes, "seconds": seconds, "jobs": a1 - a0, "jobs_per_s": (a1 - a0) / seconds,
                "enqueued": pace.enqueued, "rounds": rounds["rounds"], "idle_rounds": rounds["idle_rounds"],
                "unfinished_rounds": rounds["unfinished_rounds"], "rounds_per_s": rounds["rounds_per_s"],
                "round_ms": rounds["round_ms"], "round_phases_ms": rounds["ms_per_round"],
                "per_round": committed, "per_round_with_idle": every,
                "writes_per_job": writes_per_job(phase, a1 - a0)}


def _ratios(row: dict[str, Any], first: dict[str, Any]) -> dict[str, Any]:
    """A layout's figures over the first layout's (None where the first's is zero)."""
    def over(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    mine, theirs = row["per_round"], first["per_round"]
    out: dict[str, Any] = {k: over(mine.get(k), theirs.get(k)) for k in COMPARED}
    out["jobs_per_s"] = over(row["jobs_per_s"], first["jobs_per_s"])
    out["targets"] = {t: over(f["documents"], (theirs.get("targets") or {}).get(t, {}).get("documents"))
                      for t, f in (mine.get("targets") or {}).items()}
    return out


def series(server: Server, plan: Plan, work_dir: Path, prefetch_args: list[str],
           recruiter_args: tuple[str, ...], say: Callable[[str], None], code: Path = REPO) -> dict[str, Any]:
    """Every layout of the plan, one after another, with the code of checkout ``code`` (``bin/bench
    --round-reads-baseline-code``: an earlier commit's, run first); the figures and the ratios to
    the first layout."""
    rows = []
    other = code.resolve() != REPO.resolve()
    for layout in plan.layouts:
        say(f"bench: round reads with {layout.processes} x {layout.concurrency} = {layout.slots} slots "
            f"at {plan.rate:g} jobs/s" + (f", code of {code}" if other else "") + "...")
        layout_dir = work_dir / f"round-reads-{'baseline-' if other else ''}{layout.processes}x{layout.concurrency}"
        layout_dir.mkdir()
        try:
            rows.append(run_layout(server, layout, plan, layout_dir, prefetch_args, recruiter_args, code))
        except RuntimeError as exc:
            raise click.ClickException(f"{exc} (process logs in {layout_dir})") from None
    for row in rows:
        row["ratio_to_first"] = _ratios(row, rows[0]) if row["per_round"] and rows[0]["per_round"] else {}
    return {"rate": plan.rate, "warm_up_s": plan.warm_up_s, "window_s": plan.window_s,
            "recruiter_args": list(recruiter_args), "prefetch_args": prefetch_args, "layouts": rows,
            "code": describe_code(code) if other else None}


def comparison(before: dict[str, Any], after: dict[str, Any]) -> str:
    """The documents per committed round of both series, layout by layout, with their spread (the
    largest layout's over the smallest's)."""
    def docs(result: dict[str, Any]) -> list[float]:
        return [(r["per_round"] or {}).get("documents", 0.0) for r in result["layouts"]]

    def spread(values: list[float]) -> str:
        return _cell(max(values) / min(values)) if values and min(values) > 0 else "-"

    b, a = docs(before), docs(after)
    lines = ["", f"documents per committed round, side by side (code of {before.get('code') or 'this checkout'}, "
                 "then this checkout)",
             f"  {'layout':>7} {'before':>7} {'after':>7}"]
    lines += [f"  {_name(r):>7} {x:>7.1f} {y:>7.1f}" for r, x, y in zip(after["layouts"], b, a, strict=False)]
    lines.append(f"  largest over smallest: before {spread(b)}, after {spread(a)}")
    return "\n".join(lines)


def _name(row: dict[str, Any]) -> str:
    return f"{row['processes']}x{row['concurrency']}"


def _cell(value: float | None, fmt: str = "{:.2f}x") -> str:
    return "-" if value is None else fmt.format(value)


def table(result: dict[str, Any]) -> str:
    """The series as printed lines: one row per layout, then each layout's reads per ``command:collection``."""
    rows = result["layouts"]
    first = _name(rows[0]) if rows else "-"
    lines = ["", f"round reads per committed round at {result['rate']:g} jobs/s (no-op jobs at a steady pace), "
                 f"window {result['window_s']:g} s" + (f"; recruiter start {' '.join(result['recruiter_args'])}"
                                                       if result["recruiter_args"] else "")
             + (f"; code of {result['code']}" if result.get("code") else ""),
             f"  {'layout':>7} {'slots':>5} {'jobs/s':>7} {'rounds':>6} {'idle':>5} {'round trips':>11} "
             f"{'documents':>9} {'KiB recv':>8} {'documents*':>10}   ratio to {first}: round trips, documents, KiB, "
             "jobs/s"]
    for row in rows:
        pr, ratio = row["per_round"] or {}, row.get("ratio_to_first") or {}
        with_idle = row["per_round_with_idle"] or {}
        lines.append(f"  {_name(row):>7} {row['slots']:>5} {row['jobs_per_s']:>7.1f} {row['rounds']:>6} "
                     f"{row['idle_rounds']:>5} {pr.get('round_trips', 0):>11.1f} {pr.get('documents', 0):>9.1f} "
                     f"{pr.get('kib_received', 0):>8.1f} {with_idle.get('documents', 0):>10.1f}"
                     "   " + ", ".join(_cell(ratio.get(k)) for k in (*COMPARED, "jobs_per_s")))
    lines.append("  (* per round, idle rounds included: the recruiter's reads of the rounds that found nothing to "
                 "write are in every other figure too)")
    lines.append("  per committed round, by command:collection (round trips / documents / KiB received):")
    for row in rows:
        targets = (row["per_round"] or {}).get("targets") or {}
        lines.append(f"    {_name(row)}: " + (", ".join(
            f"{t} {f['round_trips']:.1f}/{f['documents']:.1f}/{f['reply_bytes'] / 1024:.1f}"
            for t, f in sorted(targets.items(), key=lambda kv: -kv[1]["reply_bytes"])) or "-"))
    for row in rows:
        lines.append(f"  {_name(row)}: {writes_line(row.get('writes_per_job') or {})}")
    return "\n".join(lines)
