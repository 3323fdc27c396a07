"""``recruiter stats --view summary`` (and ``auto`` past a screen): the figures at any number of groups.

What it prints is bounded whatever the number of groups and tenants: the totals over the
groups, the ``@worker:`` groups summed on one line, the groups that need attention (the first
few per reason, :mod:`recruiter.admin.overview`), the workers, the leases, the paused names
and the limits that hold jobs back (the first ``SHOWN`` of each, with how many more).

Invariant: rendering reads nothing.
"""

from __future__ import annotations

from typing import Any

from recruiter.admin.overview import GroupRow, Overview, OverviewQuery, overview_of
from recruiter.admin.stats import Stats, Window
from recruiter.cli.stats import (
    _age,
    _depth_json,
    _depth_row,
    _malformed_and_leases,
    _table,
    _window_json,
    _workers_json,
)

SHOWN = 10  # paused names and held limits printed; the others are counted
GROUPS_SHOWN = 20  # up to this many groups, the summary has a row per group (its tenants summed)


def _summary(figures: Stats, worker_groups: bool) -> Overview:
    return overview_of(figures, OverviewQuery(worker_groups=worker_groups))


def _five_minutes(windows: tuple[Window, ...]) -> tuple[str, ...]:
    if len(windows) < 2:
        return ("-",) * 5
    w = windows[1]
    return (str(w.archived), str(w.failed), "-" if w.failure_rate is None else f"{w.failure_rate:.1%}",
            _s(w.wait_p95_s), _s(w.run_p95_s) + (" ~" if w.sampled else ""))


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def render_summary(figures: Stats, worker_groups: bool = False, full_lines: int | None = None) -> str:
    """The summary; ``full_lines``: how long the full view would have been (auto chose the summary)."""
    ov = _summary(figures, worker_groups)
    lines = [f"at {figures.at.isoformat()}",
             f"{ov.groups} group{'' if ov.groups == 1 else 's'}, {ov.tenants} group and tenant pair"
             f"{'' if ov.tenants == 1 else 's'}"
             + (f" (summary: the full view is {full_lines} lines; --view full, or --group NAME / --tenant NAME)"
                if full_lines else "")]
    table: list[tuple[str, ...]] = [("", "ready", "paused", "delayed", "retrying", "assigned", "running",
                                     "oldest ready", "5m archived", "failed", "failure", "wait p95 s", "run p95 s")]
    table.append((*_depth_row("every group", ov.depth), *_five_minutes(ov.windows)))
    wg = ov.worker_groups
    if wg.count:
        table.append((*_depth_row(f"jobs aimed at workers ({wg.count} @worker: groups)", wg.depth),
                      *_five_minutes(wg.windows)))
    if 0 < ov.groups <= GROUPS_SHOWN:  # few groups (their tenants made the full view long): one row each
        table.append(("group (tenants)", *("",) * 12))
        table += [(*_depth_row(f"  {r.group or '(none)'} ({r.tenants})", r.depth), *_five_minutes(r.windows))
                  for r in overview_of(figures, OverviewQuery(size=GROUPS_SHOWN)).rows]
    lines += _table(table)
    lines.append("needs attention:" if any(a.count for a in ov.attention) else "needs attention: nothing")
    for a in ov.attention:
        if a.count:
            names = ", ".join(f"{r.group or '(none)'} {_why(a.reason, r)}" for r in a.rows)
            more = a.count - len(a.rows)
            lines.append(f"  {a.reason} ({a.count}): {names}" + (f", and {more} more" if more > 0 else ""))
    return "\n".join(lines + _tail(figures))


def worker_groups_line(figures: Stats) -> str:
    """The ``@worker:`` groups of ``figures`` summed on one line ("" if there are none)."""
    wg = _summary(figures, False).worker_groups
    if not wg.count:
        return ""
    d = wg.depth
    return (f"jobs aimed at workers ({wg.count} @worker: group{'' if wg.count == 1 else 's'}): {d.ready} ready, "
            f"{d.assigned} assigned, {d.running} running, oldest ready {_age(d.oldest_ready_s)} "
            "(--include-worker-groups lists them)")


def _why(reason: str, r: GroupRow) -> str:
    if reason == "oldest ready":
        return _age(r.depth.oldest_ready_s)
    if reason == "failing":
        return f"{r.windows[1].failed} failed in 5m"
    return f"{r.depth.ready} ready"


def _tail(figures: Stats) -> list[str]:
    w = figures.workers
    lines = [f"workers: {w.idle} idle, {w.busy} busy, {w.stopping} stopping, {w.zombies} zombies",
             *_malformed_and_leases(figures)]
    paused = [*(f"group {g}" for g in figures.paused.groups), *(f"tenant {t}" for t in figures.paused.tenants)]
    lines.append("paused: " + (", ".join(paused[:SHOWN]) or "none") + _more(len(paused)))
    holding = [v for v in figures.limits if v.held]
    lines += [f"limit: {v.describe()} ({v.running} running; holding jobs back)" for v in holding[:SHOWN]]
    if len(holding) > SHOWN:
        lines.append(f"and {len(holding) - SHOWN} more limits holding jobs back (limits list)")
    return lines


def _more(n: int) -> str:
    return f", and {n - SHOWN} more" if n > SHOWN else ""


def summary_json(figures: Stats, worker_groups: bool = False) -> dict[str, Any]:
    """``--json --view summary``: the same figures as the text, as one object."""
    ov = _summary(figures, worker_groups)
    return {
        "at": figures.at.isoformat(), "view": "summary", "groups": ov.groups, "tenants": ov.tenants,
        "totals": {**_depth_json(ov.depth), "windows": [_window_json(w) for w in ov.windows]},
        "worker_groups": {"count": ov.worker_groups.count, **_depth_json(ov.worker_groups.depth),
                          "windows": [_window_json(w) for w in ov.worker_groups.windows]},
        "attention": [{"reason": a.reason, "count": a.count,
                       "groups": [{"group": r.group, **_depth_json(r.depth), "tenants": r.tenants,
                                   "failed_5m": r.windows[1].failed if len(r.windows) > 1 else 0}
                                  for r in a.rows]} for a in ov.attention],
        "workers": {**_workers_json(figures.workers), "malformed": figures.workers.malformed},
        "paused": {"groups": list(figures.paused.groups[:SHOWN]), "tenants": list(figures.paused.tenants[:SHOWN]),
                   "count": len(figures.paused.groups) + len(figures.paused.tenants)},
    }
