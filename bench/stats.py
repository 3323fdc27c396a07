"""Figures from raw measurements: percentiles, command-stats files, per-kind sums."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

# What each ``command:collection`` of a stats file keeps in ``totals()["targets"]`` (summed over processes).
TARGET_FIELDS = ("count", "request_bytes", "reply_bytes", "documents", "inserted", "matched", "modified", "upserted",
                 "deleted", "written", "written_by_many")
READS = frozenset({"find", "aggregate", "count", "distinct", "getMore"})
WRITES = frozenset({"insert", "update", "delete", "findAndModify"})


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100): a value that was actually measured."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def percentiles(values_ms: Sequence[float]) -> dict[str, Any]:
    return {"p50_ms": percentile(values_ms, 50), "p95_ms": percentile(values_ms, 95),
            "p99_ms": percentile(values_ms, 99), "samples": len(values_ms)}


def classify(command: str) -> str:
    if command in READS:
        return "reads"
    if command in WRITES:
        return "writes"
    return "other"


def read_stats(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    except (OSError, ValueError):
        return None


def totals(snapshots: Iterable[dict[str, Any] | None]) -> dict[str, Any]:
    """Sum stats snapshots of several processes: round trips and bytes, by class and by command;
    ``targets``: per ``command:collection`` the :data:`TARGET_FIELDS` (documents read and written...)."""
    out: dict[str, Any] = {"round_trips": 0, "reads": 0, "writes": 0, "other": 0, "empty_reads": 0,
                           "empty_writes": 0, "empty_getmores": 0, "heartbeat_writes": 0, "heartbeat_reads": 0,
                           "request_bytes": 0, "reply_bytes": 0, "documents": 0, "written": 0, "retryable": 0,
                           "commands": {}, "targets": {}}
    uncounted = False  # stats written by code that does not count retryable writes (an older checkout's)
    for snap in snapshots:
        if not snap:
            continue
        for name, tally in snap["commands"].items():
            out["round_trips"] += tally["count"]
            kind = classify(name)
            out[kind] += tally["count"]
            if kind != "other":
                out[f"empty_{kind}"] += tally.get("empty", 0)
            if name == "getMore":  # the change streams' replies that carried no event
                out["empty_getmores"] += tally.get("empty", 0)
            out["request_bytes"] += tally["request_bytes"]
            out["reply_bytes"] += tally["reply_bytes"]
            out["documents"] += tally.get("documents", 0)
            out["written"] += tally.get("written", 0)
            out["retryable"] += tally.get("retryable", 0)
            uncounted = uncounted or "retryable" not in tally
            out["commands"][name] = out["commands"].get(name, 0) + tally["count"]
        for target, tally in snap.get("targets", {}).items():
            key = f"@{target}"
            if target.endswith(":heartbeats") and (kind := classify(target.split(":", 1)[0])) != "other":
                out[f"heartbeat_{kind}"] += tally["count"]
            out["commands"][key] = out["commands"].get(key, 0) + tally["count"]
            summed = out["targets"].setdefault(target, dict.fromkeys(TARGET_FIELDS, 0))
            for f in TARGET_FIELDS:
                summed[f] += tally.get(f, 0)
    if uncounted:
        del out["retryable"]
    return out


def difference(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    out = {k: after[k] - before.get(k, 0) for k in after if k not in ("commands", "targets")}
    out["commands"] = {k: v - before["commands"].get(k, 0) for k, v in after["commands"].items()
                       if v - before["commands"].get(k, 0)}
    if "targets" in after:
        was = before.get("targets") or {}
        out["targets"] = {t: {f: v - was.get(t, {}).get(f, 0) for f, v in now.items()}
                          for t, now in after["targets"].items()}
    return out


def per_job(delta: dict[str, Any], jobs: float) -> dict[str, Any]:
    if jobs <= 0:
        return {}
    return {k: delta[k] / jobs for k in ("round_trips", "reads", "writes", "other", "empty_reads", "empty_writes",
                                         "empty_getmores", "heartbeat_writes", "heartbeat_reads", "request_bytes",
                                         "reply_bytes")}
