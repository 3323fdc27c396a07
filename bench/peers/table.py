"""The peer section of ``bin/bench``: Agenda's and Celery's series, the SIGKILL test, and the peer table.

:func:`run` measures them (Agenda skipped with one line where ``node`` or ``npm`` is
missing, or when ``npm ci`` fails; Celery where it cannot be imported); :func:`table` prints the
recruiter (the design measured in the same run) and each peer series side by side, with the ratio
recruiter / peer of every figure. Celery runs one worker: its figures are in the 1-worker rows.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pymongo.errors import PyMongoError

from bench.peers import agenda, celery_peer, kill
from bench.scenario import Sizes
from bench.server import Server

KILL_JOBS_FULL = 20
KILL_JOBS_QUICK = 8


def run(server: Server, workers: list[int], sizes: Sizes, work_dir: Path, *, kill_jobs: int,
        recruiter_args: tuple[str, ...], say: Callable[[str], None], quick: bool = False) -> dict[str, Any]:
    """Agenda's series at ``workers``, Celery's at one worker (on a fresh server), then one SIGKILLed
    worker of each (Celery's on a fresh server); ``{"series", "kill"}``."""
    out: dict[str, Any] = {"series": {}, "kill": {}}
    peers_dir = work_dir / "peers"
    peers_dir.mkdir()
    reason = agenda.missing()
    if reason is None:
        try:
            agenda.install()
        except RuntimeError as exc:  # no registry, a broken cache...: the recruiter's side still runs
            reason = str(exc).splitlines()[0]
    if reason is None:
        for name, settings in agenda.VARIANTS.items():
            out["series"][name] = agenda.series(server, workers, sizes, peers_dir, say, settings, name)
    else:
        say(f"bench: Agenda series skipped: {reason}")
        out["agenda_skipped"] = reason
    if (celery_reason := celery_peer.missing()) is None:
        long_queue = celery_peer.LONG_QUEUE_QUICK if quick else celery_peer.LONG_QUEUE
        out["series"]["celery"] = celery_peer.series(sizes, peers_dir, say, long_queue)
    else:
        say(f"bench: Celery series skipped: {celery_reason}")
        out["celery_skipped"] = celery_reason
    say(f"bench: SIGKILL of one of two workers, {kill_jobs} jobs of {kill.JOB_S:g} s: recruiter...")
    (peers_dir / "kill-recruiter").mkdir()
    out["kill"]["recruiter"] = kill.recruiter_kill(server, kill_jobs, peers_dir / "kill-recruiter", recruiter_args)
    if reason is None:
        say("bench: SIGKILL of one of two workers: agenda...")
        (peers_dir / "kill-agenda").mkdir()
        out["kill"]["agenda"] = kill.agenda_kill(server, kill_jobs, peers_dir / "kill-agenda")
    if celery_reason is None:
        say("bench: SIGKILL of one of two workers: celery (on a fresh server)...")
        try:
            out["kill"]["celery"] = celery_peer.kill(kill_jobs, peers_dir / "kill-celery")
        except (RuntimeError, PyMongoError) as exc:  # Celery stalled: the rest of the table stands
            say(f"bench: SIGKILL of a celery worker failed: {str(exc)[:300]}")
    return out


def commands_per_job(window: dict[str, Any]) -> float | None:
    """Round trips per job in a steady window, of every process but the enqueuer (workers, and the
    recruiter's leader and cleaner): the enqueuer's batches fall in or out of a short window by chance."""
    per_job = window.get("per_job") or {}
    kinds = [k for k in per_job if k not in ("all", "enqueue") and per_job[k]]
    return float(sum(per_job[k]["round_trips"] for k in kinds)) if kinds else None


def _get(point: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if not isinstance(point, dict) or key not in point:
            return None
        point = point[key]
    return point


def _figures(point: dict[str, Any] | None) -> dict[str, float | None]:
    """The table's figures of one worker count; None for a phase that failed (Agenda stalled)."""
    if not point:
        return {}
    rss = _get(point, "memory", "worker_rss_kib")
    noop, long = point.get("noop") or {}, point.get("noop_long") or {}
    return {"noop": _get(point, "noop", "jobs_per_s"), "sleep100": _get(point, "sleep100", "jobs_per_s"),
            "p50": _get(point, "latency", "p50_ms"), "p95": _get(point, "latency", "p95_ms"),
            "commands": commands_per_job(noop) if "per_job" in noop else None,
            "noop_long": long.get("jobs_per_s"), "commands_long": commands_per_job(long) if "per_job" in long else None,
            "idle": _get(point, "idle", "worker_requests_per_s"), "rss": None if rss is None else rss / 1024}


ROWS = [("noop", "no-op jobs/s", "{:.1f}"), ("sleep100", "100 ms jobs/s", "{:.1f}"),
        ("p50", "enqueue-to-start p50 ms", "{:.0f}"), ("p95", "enqueue-to-start p95 ms", "{:.0f}"),
        ("commands", "commands per no-op job (all but the enqueuer)", "{:.1f}"),
        ("noop_long", "no-op jobs/s, long queue", "{:.1f}"),
        ("commands_long", "commands per no-op job, long queue", "{:.1f}"),
        ("idle", "requests/s of one idle worker", "{:.1f}"), ("rss", "worker resident memory MiB", "{:.0f}")]


OPTIONAL = ("noop_long", "commands_long")


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def columns(doc: dict[str, Any], design: str) -> list[str]:
    """The table's header: the figure, the recruiter's design, then each Agenda series and its ratio."""
    out = ["figure", design]
    for name in (doc.get("peers") or {}).get("series") or {}:
        out += [name, "ratio"]
    return out


def _killed(figures: dict[str, Any] | None, key: str) -> str:
    return f"{figures[key]} of {figures['jobs']}" if figures else "-"


def rows(doc: dict[str, Any], design: str) -> list[list[str]]:
    """The rows of the peer table: a figure, the recruiter's value, then each Agenda series' value and
    the ratio recruiter / that series."""
    peers = doc.get("peers") or {}
    ours = doc.get("results", {}).get(design, {})
    series = peers.get("series") or {}
    out: list[list[str]] = []
    for n in doc["meta"]["workers"]:
        r = _figures(ours.get(str(n)))
        theirs = [_figures(s.get("results", {}).get(str(n))) for s in series.values()]
        for key, label, fmt in ROWS:
            if r.get(key) is None and all(a.get(key) is None for a in theirs) and key in OPTIONAL:
                continue  # the long queue: measured for Celery only, at one worker
            row = [f"{label}, {n} worker(s)", _cell(r.get(key), fmt)]
            for a in theirs:
                row += [_cell(a.get(key), fmt), _ratio(r.get(key), a.get(key))]
            out.append(row)
    kills = peers.get("kill") or {}
    for key, label in (("twice", "jobs run twice"), ("lost", "jobs lost"), ("rerun", "jobs re-run (the killed one)")):
        row = [f"{label} after one SIGKILLed worker", _killed(kills.get("recruiter"), key)]
        for name in series:
            row += [_killed(kills.get(name), key) if name in kills else "", ""]
        out.append(row)
    recovered = (kills.get("recruiter") or {}).get("recovered_s")
    row = ["seconds from the SIGKILL to the last job finished", _cell(recovered, "{:.1f}")]
    for name in series:
        peer = (kills.get(name) or {}).get("recovered_s")
        row += [_cell(peer, "{:.1f}"), _ratio(recovered, peer)] if name in kills else ["", ""]
    out.append(row)
    return out


def _title(doc: dict[str, Any], design: str) -> str:
    peers = doc.get("peers") or {}
    series = peers.get("series") or {}
    parts = []
    if "agenda" in series:
        v = series["agenda"]["versions"]
        parts.append(f"Agenda {v.get('agenda', '?')} (mongo-backend {v.get('@agendajs/mongo-backend', '?')}, driver "
                     f"{v.get('mongodb', '?')}, node {v.get('node', '?')}; agenda: woken by change streams, "
                     "agenda-poll: polling only; the SIGKILL rows: agenda with change streams)")
    else:
        parts.append(f"Agenda skipped: {peers.get('agenda_skipped', '?')}")
    if "celery" in series:
        v, settings = series["celery"]["versions"], series["celery"]["settings"]
        parts.append(f"Celery {v.get('celery', '?')} on kombu {v.get('kombu', '?')}'s MongoDB transport (pymongo "
                     f"{v.get('pymongo', '?')}; one solo worker, polling every {settings['polling_interval_s']:g} s, "
                     f"long queue {settings['long_queue']} queued; delivery: {series['celery']['guarantee']})")
    else:
        parts.append(f"Celery skipped: {peers.get('celery_skipped', 'not in this run')}")
    return f"peer table: {design} beside " + "; ".join(parts)


def markdown(doc: dict[str, Any]) -> str:
    """The peer table as markdown (docs/benchmarks.md, "Peers")."""
    design = doc["peers"]["design"]
    head = columns(doc, design)
    lines = [f"{_title(doc, design)}; ratio = recruiter / peer", "", "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows(doc, design)]
    return "\n".join(lines)


def table(doc: dict[str, Any], design: str) -> str:
    lines = [_title(doc, design), "ratio = recruiter / peer", ""]
    body = [columns(doc, design), *rows(doc, design)]
    widths = [max(len(r[i]) for r in body) for i in range(len(body[0]))]
    for row in body:
        cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
