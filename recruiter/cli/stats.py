"""``recruiter stats``: the read model's figures (:mod:`recruiter.admin.stats`), once or ``--watch``-ed.

Invariant: the command reads only through :func:`recruiter.admin.stats.stats`, and says
what the read cost the server: its round trips and the documents returned, counted by
a command listener on its own client.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import click

from recruiter.admin.overview import filtered
from recruiter.admin.stats import Depth, GroupStats, Stats, Window, WorkerFigures, stats
from recruiter.cli.options import DURATION, env, target_option
from recruiter.cli.output import clear_screen, echo
from recruiter.store import (
    CommandStats,
    ConnectionProblem,
    ServerClock,
    StoreError,
    Target,
    command_listeners,
    describe,
    sync_client,
    sync_db,
    wait_until_reachable,
)

WINDOW_NAMES = {60: "1m", 300: "5m", 3600: "1h"}
VIEWS = ("auto", "summary", "full")
AUTO_FULL_LINES = 60  # --view auto prints the full figures up to this many lines (a screen), else the summary
pause = time.sleep  # between two refreshes of --watch (tests replace it)


@click.command("stats")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one object per refresh with --watch).")
@click.option("--group", "groups", multiple=True, envvar=env("STATS_GROUP"), show_envvar=True, metavar="NAME",
              help="Only this group (repeat for more; @worker:ID names a worker's own).")
@click.option("--tenant", "tenants", multiple=True, envvar=env("STATS_TENANT"), show_envvar=True, metavar="NAME",
              help="Only this tenant, in every group that has it (repeat for more): a group's figures become "
                   "those of the tenants kept.")
@click.option("--view", type=click.Choice(VIEWS), default="auto", show_default=True, envvar=env("STATS_VIEW"),
              show_envvar=True,
              help=f"full: every group and tenant; summary: totals, the groups that need attention and the "
                   f"workers, at any number of groups; auto: full if it is at most {AUTO_FULL_LINES} lines (always "
                   f"with --json), else the summary.")
@click.option("--include-worker-groups", is_flag=True, envvar=env("STATS_INCLUDE_WORKER_GROUPS"), show_envvar=True,
              help="List the @worker:ID groups (jobs aimed at one worker) as groups; by default they are summed "
                   "on one line.")
@click.option("--watch", is_flag=True, help="Print the figures again every --interval until interrupted.")
@click.option("--interval", type=DURATION, default="2s", show_default=True, envvar=env("STATS_INTERVAL"),
              show_envvar=True, help="Time between two refreshes of --watch.")
@target_option
def stats_command(as_json: bool, groups: tuple[str, ...], tenants: tuple[str, ...], view: str,
                  include_worker_groups: bool, watch: bool, interval: timedelta, target: Target) -> None:
    """Depth per group and tenant (ready, paused, delayed, retrying, assigned, running, oldest ready),
    throughput, failures and wait and run times over 1m, 5m and 1h, workers and leases.

    With many groups (more than a screen) it prints a summary instead: see --view."""
    shown = Shown(groups, tenants, view, include_worker_groups)
    try:
        t = target
        wait_until_reachable(t, timeout_s=5.0)
        counter = CommandStats()
        client = sync_client(t, app_name="recruiter-stats", server_selection_timeout_s=5.0,
                             event_listeners=[counter, *command_listeners()])
        try:
            while True:
                before = _totals(counter)
                clock = ServerClock()
                clock.calibrate_sync(client, samples=1)  # ages in seconds: one reading
                figures = stats(sync_db(client, t), clock.now())
                after = _totals(counter)
                cost = (after[0] - before[0], after[1] - before[1])
                _print(figures, cost, as_json, watch, shown)
                if not watch:
                    return
                pause(interval.total_seconds())
        except StoreError as exc:
            raise click.ClickException(describe(exc, t)) from None
        except KeyboardInterrupt:
            return
        finally:
            client.close()
    except ConnectionProblem as exc:
        raise click.ClickException(str(exc)) from None


def _totals(counter: CommandStats) -> tuple[int, int]:
    snap = counter.snapshot()["commands"]
    assert isinstance(snap, dict)
    return sum(t["count"] for t in snap.values()), sum(t["documents"] for t in snap.values())


@dataclass(frozen=True)
class Shown:
    """What to print of the figures: ``--group``, ``--tenant``, ``--view``, ``--include-worker-groups``."""

    groups: tuple[str, ...] = ()
    tenants: tuple[str, ...] = ()
    view: str = "auto"
    worker_groups: bool = False


def _print(figures: Stats, cost: tuple[int, int], as_json: bool, watch: bool, shown: Shown = Shown()) -> None:
    from recruiter.cli.stats_summary import render_summary, summary_json

    kept = filtered(figures, groups=shown.groups, tenants=shown.tenants, worker_groups=shown.worker_groups)
    summary = shown.view == "summary"
    full = "" if as_json or summary else render_stats(kept)
    if shown.view == "auto" and full.count("\n") + 1 > AUTO_FULL_LINES:
        summary = True
    # The summary sums the @worker: groups on a line of their own.
    summed = filtered(figures, groups=shown.groups, tenants=shown.tenants, worker_groups=True)
    if as_json:
        body = summary_json(summed, shown.worker_groups) if summary else stats_json(kept)
        if not summary and not shown.worker_groups:  # the @worker: groups left out of "groups", summed
            body["worker_groups"] = summary_json(summed)["worker_groups"]
        doc = {**body, "cost": {"round_trips": cost[0], "documents": cost[1]}}
        # A lease's owner and epoch are as stored (any type): shown as text if JSON has none for them.
        echo(json.dumps(doc, default=str) if watch else json.dumps(doc, indent=2, default=str))
        return
    if watch:
        clear_screen()  # a fresh screen per refresh
    if summary:
        full_lines = full.count("\n") + 1 if full else None
        echo(render_summary(summed, shown.worker_groups, full_lines))
    else:
        echo(full + _aimed(summed, shown.worker_groups))
    echo(f"read: {cost[0]} round trips, {cost[1]} documents returned")


def _aimed(figures: Stats, listed: bool) -> str:
    """The @worker: groups on one line, when they are not listed as groups."""
    from recruiter.cli.stats_summary import worker_groups_line

    line = "" if listed else worker_groups_line(figures)
    return f"\n{line}" if line else ""


# -- JSON ----------------------------------------------------------------------------------------


def _depth_json(d: Depth) -> dict[str, Any]:
    return {"ready": d.ready, "paused": d.paused, "delayed": d.delayed, "retrying": d.retrying,
            "assigned": d.assigned, "running": d.running, "oldest_ready_s": d.oldest_ready_s}


def _window_json(w: Window) -> dict[str, Any]:
    return {"window": WINDOW_NAMES.get(w.seconds, f"{w.seconds}s"), "archived": w.archived, "failed": w.failed,
            "throughput_per_s": w.throughput_per_s, "failure_rate": w.failure_rate,
            "wait_p50_s": w.wait_p50_s, "wait_p95_s": w.wait_p95_s, "run_p50_s": w.run_p50_s,
            "run_p95_s": w.run_p95_s, "sampled": w.sampled}


def _workers_json(f: WorkerFigures) -> dict[str, int]:
    return {"idle": f.idle, "busy": f.busy, "stopping": f.stopping, "zombies": f.zombies}


def stats_json(figures: Stats) -> dict[str, Any]:
    return {
        "at": figures.at.isoformat(),
        "groups": [_group_json(g) for g in figures.groups],
        "workers": {**_workers_json(figures.workers), "malformed": figures.workers.malformed},
        "workers_by_group": {g: _workers_json(f) for g, f in figures.workers_by_group.items()},
        "leases": [{"name": str(lease.name), "owner": lease.owner, "epoch": lease.epoch, "held": lease.held,
                    "expires_at": lease.expires_at.isoformat() if lease.expires_at else None}
                   for lease in figures.leases],
        "paused": {"groups": list(figures.paused.groups), "tenants": list(figures.paused.tenants)},
        "limits": [{"group": v.group, "tenant": v.tenant, "rate": v.limit.rate.text if v.limit.rate else None,
                    "burst": v.limit.rate.burst if v.limit.rate else None, "max_running": v.limit.max_running,
                    "running": v.running, "tokens": None if v.tokens is None else round(v.tokens, 2),
                    "held": v.held} for v in figures.limits],
        "malformed_limits": list(figures.malformed_limits),
    }


def _group_json(g: GroupStats) -> dict[str, Any]:
    return {"group": g.group, **_depth_json(g.depth), "windows": [_window_json(w) for w in g.windows],
            "tenants": [{"tenant": t.tenant, **_depth_json(t.depth), "windows": [_window_json(w) for w in t.windows]}
                        for t in g.tenants]}


# -- text ----------------------------------------------------------------------------------------


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    return f"{seconds / 60:.1f}m" if seconds < 7200 else f"{seconds / 3600:.1f}h"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()
            for r in rows]


def _depth_row(name: str, d: Depth) -> tuple[str, ...]:
    return (name, str(d.ready), str(d.paused), str(d.delayed), str(d.retrying), str(d.assigned), str(d.running),
            _age(d.oldest_ready_s))


def _window_rows(name: str, windows: tuple[Window, ...]) -> list[tuple[str, ...]]:
    return [(name if i == 0 else "", WINDOW_NAMES.get(w.seconds, str(w.seconds)), str(w.archived),
             f"{w.throughput_per_s:.2f}", str(w.failed),
             "-" if w.failure_rate is None else f"{w.failure_rate:.1%}",
             _s(w.wait_p50_s), _s(w.wait_p95_s), _s(w.run_p50_s), _s(w.run_p95_s) + (" ~" if w.sampled else ""))
            for i, w in enumerate(windows)]


def render_stats(figures: Stats) -> str:
    lines = [f"at {figures.at.isoformat()}"]
    if not figures.groups:
        lines.append("no jobs waiting, and none archived in the last hour")
    else:
        depth: list[tuple[str, ...]] = [("group / tenant", "ready", "paused", "delayed", "retrying", "assigned",
                                         "running", "oldest ready")]
        history: list[tuple[str, ...]] = [("group / tenant", "window", "archived", "per s", "failed", "failure",
                                           "wait p50 s", "wait p95 s", "run p50 s", "run p95 s")]
        for g in figures.groups:
            depth.append(_depth_row(g.group or "(none)", g.depth))
            history.extend(_window_rows(g.group or "(none)", g.windows))
            for t in g.tenants:
                depth.append(_depth_row("  " + (t.tenant or "(no tenant)"), t.depth))
                history.extend(_window_rows("  " + (t.tenant or "(no tenant)"), t.windows))
        lines += [*_table(depth), "", *_table(history)]
        if any(w.sampled for g in figures.groups for w in g.windows):
            lines.append("~: times from the newest jobs of the window only (a sample)")
    w = figures.workers
    lines += ["", f"workers: {w.idle} idle, {w.busy} busy, {w.stopping} stopping, {w.zombies} zombies"
              + "".join(f"; {g}: {f.idle}/{f.busy}/{f.stopping}/{f.zombies}" for g, f in
                        figures.workers_by_group.items())]
    lines += _malformed_and_leases(figures)
    paused = figures.paused
    lines.append("paused: " + (", ".join([*(f"group {g}" for g in paused.groups),
                                          *(f"tenant {t}" for t in paused.tenants)]) or "none"))
    for v in figures.limits:
        now = f"{v.running} running" + ("" if v.tokens is None else f", {v.tokens:.1f} tokens")
        lines.append(f"limit: {v.describe()} ({now}{'; holding jobs back' if v.held else ''})")
    lines += [f"limit malformed, held by the recruiter: {line}" for line in figures.malformed_limits]
    return "\n".join(lines)


def _malformed_and_leases(figures: Stats) -> list[str]:
    """The malformed roster entries and the leases, a line each (the full view and the summary)."""
    w, lines = figures.workers, []
    if w.malformed:
        lines.append(f"{w.malformed} malformed roster entr{'y' if w.malformed == 1 else 'ies'}, given no work "
                     "(see workers list)")
    for lease in figures.leases:
        held = f"held by {lease.owner} until {_iso(lease.expires_at)}" if lease.held else \
            f"free (last held by {lease.owner})"
        lines.append(f"{lease.name} lease: epoch {lease.epoch}, {held}")
    return lines


def _iso(value: datetime | None) -> str:
    return value.isoformat() if value is not None else "-"
