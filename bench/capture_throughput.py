"""``python -m bench.capture_throughput``: how fast a job's output is captured, by its shape.

A job writes ``--mb`` megabytes to ``sys.stdout`` inside an attempt (the capture installed,
the real stream going to ``/dev/null``), in five shapes side by side:

- ``lines``: 100-character lines, one ``write`` each (what ``print`` in a loop does);
- ``no newline``: 100-character writes with no newline at all (one endless line);
- ``\\r progress``: ``\\r`` and a 60-character progress bar per write, no newline;
- ``1 MiB lines``: 1 MiB writes, each ending a line;
- ``1 MiB no newline``: 1 MiB writes, no newline.

It prints megabytes per second for each. Capture must be linear in the output: the
figures of the shapes stay close whatever ``--mb`` is (before issue 22, 2 MB of ``\\r``
progress took 26 s and 200 MB without a newline 31 s, where 200 MB of lines took 4 s).
Run it with ``PYTHONPATH`` pointing at another checkout to compare.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import click

from recruiter.processes.worker.capture import LogBuffer, capturing, ensure_installed

MB = 1_000_000


def shapes(total: int) -> dict[str, Callable[[], None]]:
    line = "x" * 99 + "\n"
    chunk = "y" * 100
    bar = "\r[" + "#" * 57 + "]"
    big_line = "z" * (1024 * 1024 - 1) + "\n"
    big = "w" * (1024 * 1024)

    def writing(piece: str) -> Callable[[], None]:
        def run() -> None:
            write = sys.stdout.write
            for _ in range(max(1, total // len(piece))):
                write(piece)
        return run

    return {"lines": writing(line), "no newline": writing(chunk), "\\r progress": writing(bar),
            "1 MiB lines": writing(big_line), "1 MiB no newline": writing(big)}


def mb_per_s(run: Callable[[], None], total: int) -> tuple[float, int]:
    buffer = LogBuffer()
    start = time.perf_counter()
    with capturing(buffer):
        run()
    text, _ = buffer.text()
    elapsed = time.perf_counter() - start
    return total / MB / elapsed, len(text)


@click.command()
@click.option("--mb", type=click.IntRange(1), default=50, show_default=True, help="Megabytes written per shape.")
def main(mb: int) -> None:
    """Print the capture's throughput for each output shape."""
    total = mb * MB
    real = sys.stdout
    with open(os.devnull, "w") as devnull:
        sys.stdout = devnull
        try:
            ensure_installed()
            figures = {name: mb_per_s(run, total) for name, run in shapes(total).items()}
        finally:
            sys.stdout = real
    print(f"capture throughput, {mb} MB written per shape (MB/s; kept: bytes the buffer kept)")
    for name, (speed, kept) in figures.items():
        print(f"  {name:<18} {speed:>9.1f} MB/s   kept {kept}")


if __name__ == "__main__":
    main()
