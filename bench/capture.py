"""``python -m bench.capture``: what keeping a job's logs costs per line, and ``ctx.progress`` per call.

Each source (stdlib ``logging``, structlog, ``print``) is timed three ways, its output
going to ``/dev/null`` so that the terminal is not what is measured:

- before the capture is installed (the cost of the line itself);
- installed, outside an attempt (what the worker's own lines pay: a context lookup);
- installed, inside an attempt (the line is formatted and kept in a bounded buffer).

Then ``ctx.progress`` with the worker's reporter (a check and one reference replaced).
Figures are the best of ``--repeat`` runs of ``--lines`` calls, in microseconds per call.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime

import click
import structlog

from recruiter.domain.workable import JobContext
from recruiter.processes.worker.capture import LogBuffer, capturing, ensure_installed
from recruiter.processes.worker.state import Said


def per_call_us(fn: Callable[[int], None], calls: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn(calls)
        best = min(best, time.perf_counter() - start)
    return best / calls * 1e6


def sources() -> dict[str, Callable[[int], None]]:
    std = logging.getLogger("bench.capture")
    slog = structlog.get_logger()

    def with_logging(n: int) -> None:
        for i in range(n):
            std.info("copied file %d of %d", i, n)

    def with_structlog(n: int) -> None:
        for i in range(n):
            slog.info("copied file", i=i, n=n)

    def with_print(n: int) -> None:
        for i in range(n):
            print(f"copied file {i} of {n}")

    return {"logging": with_logging, "structlog": with_structlog, "print": with_print}


def progress_us(calls: int, repeat: int) -> float:
    box: list[Said] = []

    def report(value: float | None, message: str | None) -> None:
        box[:] = [Said(value, message, datetime.now(UTC))]

    ctx = JobContext("j", 1, "w", "g", reporter=report)

    def run(n: int) -> None:
        for i in range(n):
            ctx.progress(i / n, "copying")

    return per_call_us(run, calls, repeat)


@click.command()
@click.option("--lines", type=click.IntRange(1), default=20_000, show_default=True)
@click.option("--repeat", type=click.IntRange(1), default=5, show_default=True)
def main(lines: int, repeat: int) -> None:
    out = sys.stdout
    devnull = open(os.devnull, "w")  # noqa: SIM115 - open for the whole run
    handler = logging.StreamHandler(devnull)
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    structlog.configure(processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso"),
                                    structlog.processors.JSONRenderer()],
                        logger_factory=structlog.PrintLoggerFactory(file=devnull), cache_logger_on_first_use=True)
    sys.stdout = devnull
    figures: dict[str, dict[str, float]] = {}
    try:
        runs = sources()
        for name, fn in runs.items():
            figures[name] = {"not installed": per_call_us(fn, lines, repeat)}
        ensure_installed()
        for name, fn in runs.items():
            figures[name]["outside an attempt"] = per_call_us(fn, lines, repeat)
            buffer = LogBuffer()
            with capturing(buffer):
                figures[name]["captured"] = per_call_us(fn, lines, repeat)
            text, cut = buffer.text()
            if not (text and cut):
                raise RuntimeError("the bound was not reached: the figure should include dropping old lines")
    finally:
        sys.stdout = out
    print(f"{'source':<10} {'not installed':>14} {'outside attempt':>16} {'captured':>10}   (µs per line)")
    for name, row in figures.items():
        extra = row["captured"] - row["not installed"]
        print(f"{name:<10} {row['not installed']:>14.2f} {row['outside an attempt']:>16.2f} "
              f"{row['captured']:>10.2f}   capture adds {extra:.2f} µs")
    print(f"ctx.progress with the worker's reporter: {progress_us(lines, repeat):.2f} µs per call")


if __name__ == "__main__":
    main()
