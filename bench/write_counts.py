"""The documents each kind of write wrote per job, and the retryable writes sent per job, in a
capacity run (:mod:`bench.capacity`): from the write replies the processes count
(:mod:`recruiter.store.monitoring`), divided by the jobs done in the window.

Invariant: every figure is a count divided by the jobs done; where no job was done, or the
code that ran counts nothing (a baseline older than the count), the figure is empty and its
line or cell shows ``-``, never 0.
"""

from __future__ import annotations

from typing import Any

# The documents written per job, by what wrote them: (name, process kind, ``command:collection``s, part).
# Part "all" is every document the commands wrote; "many" those written by commands whose every statement
# may touch many documents (the assignment is one update_many), "one" the others (the outcomes cleared
# one entry each: the outcomes no assignment cleared). The lock's update:scheduled also holds reschedules,
# none with no-op jobs.
WRITE_KINDS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("lock", "recruiter", ("update:scheduled",), "all"),
    ("assign", "recruiter", ("update:roster",), "many"),
    ("clear", "recruiter", ("update:roster",), "one"),
    ("archive", "recruiter", ("insert:archived", "update:archived"), "all"),
    ("delete", "recruiter", ("delete:scheduled",), "all"),
    ("outcome", "worker", ("update:roster",), "all"),
    ("heartbeat", "worker", ("update:heartbeats",), "all"),
    ("enqueue", "enqueue", ("insert:scheduled",), "all"),
)
WRITE_PARTS = {"all": "", "many": " by update_many", "one": " one entry each"}
# What else a source holds, where it is more than its name says (the worker writes a job's outcome and
# the started mark of its next job, handed ahead, in one round trip: the replies do not tell them apart).
WRITE_NOTES = {"outcome": "outcomes and the look-ahead's started marks"}


# The bench's own enqueuer is summed as "enqueue" (bench.scenario.Producer); it is the jobs' producer.
SHOWN_AS = {"enqueue": "producer"}


def _written(figures: dict[str, Any], part: str) -> int:
    written, many = int(figures.get("written", 0)), int(figures.get("written_by_many", 0))
    return {"all": written, "many": many, "one": written - many}[part]


def writes_per_job(phase: dict[str, dict[str, Any]], jobs: int) -> dict[str, Any]:
    """Documents written per job: ``kinds`` by the names of :data:`WRITE_KINDS`, ``sources`` per process kind
    and ``command:collection`` (every write that wrote a document), ``named`` what each kind counts."""
    if not jobs:
        return {}
    kinds: dict[str, float] = {}
    named: dict[str, str] = {}
    for name, kind, targets, part in WRITE_KINDS:
        found = (phase.get(kind) or {}).get("targets") or {}
        kinds[name] = sum(_written(found.get(t) or {}, part) for t in targets) / jobs
        note = f": {WRITE_NOTES[name]}" if name in WRITE_NOTES else ""
        named[name] = f"{SHOWN_AS.get(kind, kind)} {'+'.join(targets)}{WRITE_PARTS[part]}{note}"
    sources = {f"{SHOWN_AS.get(kind, kind)} {t}": f["written"] / jobs for kind, figures in sorted(phase.items())
               for t, f in sorted((figures.get("targets") or {}).items()) if f.get("written")}
    return {"kinds": kinds, "named": named, "sources": sources}


def retryable_per_job(phase: dict[str, dict[str, Any]], jobs: int) -> dict[str, float]:
    """Retryable writes sent per job, per process kind and ``all`` (recruiter.store.unrecorded: the
    embedded server keeps each one's reply and goes through all it keeps on every one); empty when no
    job was done or the code counts none (a baseline older than the count)."""
    if not jobs or not all("retryable" in figures for figures in phase.values()):
        return {}
    out = {SHOWN_AS.get(kind, kind): figures.get("retryable", 0) / jobs for kind, figures in sorted(phase.items())}
    return {**out, "all": sum(out.values())}


def retryable_line(r: dict[str, float]) -> str:
    """``retryable writes per job: 0.05 (worker 0.00, recruiter 0.03, ...)``."""
    if not r:
        return "retryable writes per job: - (not counted)"
    parts = ", ".join(f"{kind} {v:.2f}" for kind, v in r.items() if kind != "all")
    return f"retryable writes per job: {r['all']:.2f} ({parts})"


def _counted(kind_name: str) -> set[str]:
    _, kind, targets, _ = next(k for k in WRITE_KINDS if k[0] == kind_name)
    return {f"{SHOWN_AS.get(kind, kind)} {t}" for t in targets}


def writes_line(w: dict[str, Any]) -> str:
    """``document writes per job: lock x (recruiter update:scheduled), ...; other: ...``."""
    if not w:
        return "document writes per job: - (no job done)"
    counted = set().union(*(_counted(name) for name in w["kinds"]))
    others = ", ".join(f"{source} {v:.2f}" for source, v in w["sources"].items() if source not in counted)
    return ("document writes per job: " + ", ".join(f"{name} {v:.2f} ({w['named'][name]})"
                                                    for name, v in w["kinds"].items())
            + f"; other: {others or '-'}")


def retryable_row(before: dict[str, Any], after: dict[str, Any]) -> tuple[str, str, str, str]:
    """The comparison's row of retryable writes per job, all processes (- where not counted)."""
    b = (before.get("retryable_per_job") or {}).get("all")
    a = (after.get("retryable_per_job") or {}).get("all")
    return ("retryable writes per job (all processes)", "-" if b is None else f"{b:.2f}",
            "-" if a is None else f"{a:.2f}", f"{a / b:.2f}x" if a is not None and b else "-")


def writes_rows(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """The comparison's rows of document writes per job, one per kind of write."""
    b = (before.get("writes_per_job") or {}).get("kinds") or {}
    a = (after.get("writes_per_job") or {}).get("kinds") or {}

    def cell(kinds: dict[str, float], name: str) -> str:
        # Code whose command stats count no written documents (a baseline older than the count): not known.
        return f"{kinds.get(name, 0):.2f}" if any(kinds.values()) else "-"

    return [(f"document writes per job: {name}", cell(b, name), cell(a, name),
             f"{a.get(name, 0) / b[name]:.2f}x" if b.get(name) else "-") for name in dict.fromkeys([*b, *a])]
