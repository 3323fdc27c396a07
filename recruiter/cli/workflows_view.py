"""What ``recruiter workflows list|show`` print: tables and JSON (pure; the CLI module reads)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from recruiter.admin.workflow_view import KindStats, StepView, WorkflowRow, WorkflowView
from recruiter.cli.output import cell


def _table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _time(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "-"


def render_list(rows: Sequence[WorkflowRow], aside: int) -> str:
    """``workflows list``: one line per workflow, newest first."""
    lines = [("id", "name", "kind", "state", "jobs", "done", "failed", "pending", "created (UTC)")]
    lines += [(str(r.id), cell(r.name), cell(r.kind), r.state, str(r.jobs), str(r.done), str(r.failed),
               str(r.pending), _time(r.created_at)) for r in rows]
    out = _table(lines) if rows else "no workflows"
    if aside:
        out += f"\n{aside} job(s) set aside: their workflow field is malformed (workflows show ID names them)"
    return out


def row_json(r: WorkflowRow) -> dict[str, Any]:
    return {"id": str(r.id), "name": r.name, "kind": r.kind, "state": r.state, "jobs": r.jobs, "done": r.done,
            "failed": r.failed, "pending": r.pending,
            "created_at": r.created_at.isoformat() if r.created_at is not None else None}


def _state(s: StepView) -> str:
    extra = f" on {s.worker}" if s.worker else (f": {s.reason}" if s.reason and s.failed else "")
    return cell(f"{s.state}{extra}")


def render_show(view: WorkflowView) -> str:
    """``workflows show``: the workflow, then its steps as a tree (each step under its deps, in order)."""
    counts = view.counts()
    head = [f"workflow {view.id}  {cell(view.name)} ({view.kind}), {view.state}: {counts['done']} done, "
            f"{counts['failed']} failed, {counts['pending']} pending of {counts['total']} steps"]
    if view.kind == "batch":
        jobs = view.counts(jobs_only=True)
        head.append(f"batch progress: {jobs['done']} done, {jobs['failed']} failed, {jobs['pending']} pending "
                    f"of {jobs['total']} jobs")
    rows = [("step", "state", "job", "waits for")]
    depth: dict[str, int] = {}
    for s in view.steps:
        depth[s.name] = 1 + max((depth.get(d, 0) for d in s.deps), default=-1)
        name = ("  " * depth[s.name] + ("└ " if s.deps else "") + s.name
                + (f" [{s.callback}]" if s.callback else ""))
        rows.append((cell(name), _state(s), str(s.job_id) + (f" (retry of {len(s.earlier)})" if s.earlier else ""),
                     cell(", ".join(s.deps)) or "-"))
    lines = head + ([_table(rows)] if view.steps else [])
    lines += [f"set aside: job {cell(job_id)}: {cell(reason)}" for job_id, reason in view.set_aside]
    return "\n".join(lines)


def show_json(view: WorkflowView) -> dict[str, Any]:
    """``workflows show --json``: the workflow, its counts and every step."""
    return {"id": str(view.id), "name": view.name, "kind": view.kind, "state": view.state,
            "counts": view.counts(), **({"progress": view.counts(jobs_only=True)} if view.kind == "batch" else {}),
            "steps": [{"name": s.name, "state": s.state, "job": str(s.job_id), "deps": list(s.deps),
                       "worker": s.worker, "reason": s.reason, "callback": s.callback,
                       "earlier_jobs": [str(i) for i in s.earlier]} for s in view.steps],
            "set_aside": [{"job": job_id, "reason": reason} for job_id, reason in view.set_aside]}


def render_stats(stats: Sequence[KindStats]) -> str:
    """``workflows stats``: one line per workflow name."""
    if not stats:
        return "no workflows"
    lines = [("name", "workflows", "running", "done", "failed", "jobs done", "jobs failed", "jobs pending")]
    lines += [(cell(k.name), str(k.workflows), str(k.running), str(k.done), str(k.failed), str(k.jobs_done),
               str(k.jobs_failed), str(k.jobs_pending)) for k in stats]
    return _table(lines)


def stats_json(k: KindStats) -> dict[str, Any]:
    return {"name": k.name, "workflows": k.workflows, "running": k.running, "done": k.done, "failed": k.failed,
            "jobs": {"done": k.jobs_done, "failed": k.jobs_failed, "pending": k.jobs_pending}}
