"""The dashboard's workflow pages (GET): the workflows, newest first, and one workflow's steps.

The list reads the counts of every workflow in one aggregation per collection (the
``by_workflow`` index: :func:`recruiter.admin.workflow_view.list_workflows`, what
``recruiter workflows list|stats`` read), summarises them per name, and shows the newest
``limit`` of them (50 unless asked, at most ``Limits.max_page``) with their total. One
workflow's page reads its jobs (:func:`~recruiter.admin.workflow_view.read_workflow`, what
``workflows show`` reads) and shows its steps in dependency order, at most
:data:`STEPS_SHOWN`.

Invariant: a query or id is checked before anything is read (400, or 404 for an id that
names no workflow: as the job page); every count shown says when what is shown is cut.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from recruiter.admin.workflow_view import WorkflowRow, list_workflows, read_workflow, stats_by_name
from recruiter.web.app import Dashboard, Handler, HttpProblem
from recruiter.web.pages import _one, _page_size
from recruiter.web.workflow_views import aside_rows, object_id_of, step_rows

NAMES_SHOWN = 50  # the workflow names the summary shows (the most workflows first)
STEPS_SHOWN = 500  # the steps one workflow's page shows (``workflows show ID`` prints them all)


async def workflows(dash: Dashboard, request: Request) -> Response:
    limit = _page_size(request, dash.settings.limits.max_page)
    name = _one(request, "name", dash.settings.limits.max_field)
    rows, aside = await dash.read(lambda: list_workflows(dash.db, None))
    stats = sorted(stats_by_name(rows), key=lambda k: (-k.workflows, k.name))
    chosen: list[WorkflowRow] = [r for r in rows if name is None or r.name == name]
    return dash.page(request, "workflows.html", nav="workflows", rows=chosen[:limit], total=len(chosen),
                     limit=limit, name=name, stats=stats[:NAMES_SHOWN], names=len(stats), names_shown=NAMES_SHOWN,
                     aside=aside)


async def workflow(dash: Dashboard, request: Request) -> Response:
    raw = request.path_params["workflow_id"]
    wid = object_id_of(raw)
    view = await dash.read(lambda: read_workflow(dash.db, wid)) if wid is not None else None
    if view is None:
        raise HttpProblem(404, f"no workflow {raw[:60]}")
    steps = step_rows(view)
    return dash.page(request, "workflow.html", nav="workflows", wf=view, counts=view.counts(),
                     progress=view.counts(jobs_only=True) if view.kind == "batch" else None,
                     steps=steps[:STEPS_SHOWN], steps_total=len(steps), steps_shown=STEPS_SHOWN,
                     failed=[s.name for s in steps if s.failed], aside=aside_rows(view))


ROUTES: list[tuple[str, Handler]] = [
    ("/workflows", workflows),
    ("/workflows/{workflow_id}", workflow),
]
