"""Time charts drawn as inline SVG by the server: the geometry, computed here; the markup, in ``history.html``.

A :class:`Chart` places buckets on a real time axis (x: the range's start to its end, labelled
in UTC; y: from 0 to a round number above the highest value, labelled with its unit). A bucket
no leader recorded is a gap: the lines stop there and the gap is shaded, never bridged. A value
that is None in a recorded bucket (no wait where no job started) breaks its line too, unshaded.

Invariant: pure; every coordinate is a number this module computed, every label a string the
template escapes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from recruiter.admin.timeline import History
from recruiter.domain.timeline import WIDTH as BUCKET
from recruiter.domain.timeline import Totals

WIDTH, HEIGHT = 720, 220
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 12, 40  # room for the axes' labels
MAX_X_TICKS = 7
STEPS = [timedelta(minutes=m) for m in (1, 5, 10, 15, 30)] + [timedelta(hours=h) for h in (1, 2, 3, 6, 12)] + [
    timedelta(days=d) for d in (1, 2, 7)]

Value = Callable[[Totals], float | None]  # a bucket's figure, from its totals (None: no value)


@dataclass(frozen=True)
class Tick:
    at: float  # the coordinate along its axis
    label: str


@dataclass(frozen=True)
class Line:
    label: str
    css: str
    path: str  # the SVG path: one "M ... L ..." run per stretch without a gap
    dots: list[tuple[float, float]]  # points standing alone (no neighbour to join), drawn as dots


@dataclass(frozen=True)
class Chart:
    title: str
    y_label: str
    lines: list[Line]
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    gaps: list[tuple[float, float]]  # x ranges no leader recorded, shaded
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    top: int = TOP

    @property
    def right(self) -> int:
        return self.width - RIGHT

    @property
    def bottom(self) -> int:
        return self.height - BOTTOM


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 4, 8 times a power of ten at or above ``value`` (1 for nothing): quarters stay round."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    return next(float(m * power) for m in (1, 2, 4, 8, 10) if m * power >= value * (1 - 1e-9))


def time_chart(title: str, y_label: str, since: datetime, until: datetime, width: timedelta,
               buckets: Sequence[tuple[datetime, Totals | None]], series: Sequence[tuple[str, str, Value]],
               fmt: Callable[[float], str]) -> Chart:
    """A chart of ``buckets`` (start, totals or None for a gap) from ``since`` to the end of the bucket
    at ``until``; one line per ``series`` (label, css class, the figure of a bucket's totals)."""
    end = until + width
    span = (end - since).total_seconds() or 1.0

    def x(at: datetime) -> float:
        return round(LEFT + (at - since).total_seconds() / span * (WIDTH - LEFT - RIGHT), 1)

    values = [[None if t is None else value(t) for _, t in buckets] for _, _, value in series]
    top_value = nice_ceiling(max((v for vs in values for v in vs if v is not None), default=0.0))

    def y(v: float) -> float:
        return round(HEIGHT - BOTTOM - v / top_value * (HEIGHT - BOTTOM - TOP), 1)

    lines = []
    for (label, css, _), vs in zip(series, values, strict=True):
        runs = _runs([(x(at + width / 2), None if v is None else y(v)) for (at, _), v in zip(buckets, vs, strict=True)])
        path = " ".join("M " + " L ".join(f"{px},{py}" for px, py in run) for run in runs if len(run) > 1)
        lines.append(Line(label, css, path, [run[0] for run in runs if len(run) == 1]))
    gaps = _merge([(x(at), x(at + width)) for at, t in buckets if t is None])
    y_ticks = [Tick(y(top_value * i / 4), fmt(top_value * i / 4)) for i in range(5)]
    return Chart(title, y_label, lines, _x_ticks(since, end, x), y_ticks, gaps)


def _runs(points: list[tuple[float, float | None]]) -> list[list[tuple[float, float]]]:
    """The stretches of points without a None between them."""
    runs: list[list[tuple[float, float]]] = [[]]
    for px, py in points:
        if py is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append((px, py))
    return [r for r in runs if r]


def _merge(ranges: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for lo, hi in ranges:
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    return merged


def _x_ticks(since: datetime, end: datetime, x: Callable[[datetime], float]) -> list[Tick]:
    """Ticks at round times (UTC), at most MAX_X_TICKS: hours and minutes, or dates from a day's step."""
    span = end - since
    step = next((s for s in STEPS if span / s <= MAX_X_TICKS), STEPS[-1])
    epoch = datetime(2000, 1, 3, tzinfo=since.tzinfo)  # a Monday: weekly ticks fall on Mondays
    first = epoch + math.ceil((since - epoch) / step) * step
    fmt = "%m-%d" if step >= timedelta(days=1) else ("%m-%d %H:%M" if span > timedelta(days=1) else "%H:%M")
    ticks = []
    at = first
    while at <= end:
        ticks.append(Tick(x(at), at.strftime(fmt)))
        at += step
    return ticks


def count(value: float) -> str:
    return f"{value:g}"


def seconds(value: float) -> str:
    if value >= 3600:
        return f"{value / 3600:g} h"
    return f"{value / 60:g} min" if value >= 120 else f"{value:g} s"


def history_charts(history: History) -> list[Chart]:
    """The charts of the history page: jobs done and failed per bucket, and their wait (mean, longest)."""
    series = history.total if history.of_group is None else history.of_group
    unit = "minute" if series.resolution == "m" else "hour"
    width = BUCKET[series.resolution]
    return [
        time_chart(f"Jobs per {unit}", f"jobs per {unit}", history.since, history.until, width, series.points,
                   [("done", "done", lambda t: t.done), ("failed", "failed", lambda t: t.failed)], count),
        time_chart("Wait from due to start", "seconds", history.since, history.until, width, series.points,
                   [("mean", "wait", lambda t: t.wait_mean_s), ("longest", "wait-max",
                                                               lambda t: t.wait_max_s if t.wait_n else None)],
                   seconds),
    ]
