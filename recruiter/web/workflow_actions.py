"""The dashboard's workflow actions (POST): cancel a workflow, retry its failed steps.

Each calls what ``recruiter workflows cancel|retry`` call
(:func:`recruiter.admin.workflows.cancel_workflow`, :func:`~recruiter.admin.workflows.retry_workflow`)
and says what happened to its steps, counted by outcome and named (:mod:`recruiter.web.workflow_views`).

Invariant: as every action (:mod:`recruiter.web.actions`): the form's CSRF token first
(403, nothing read), then its values (400 with a one-line reason, nothing written), then
one audit entry for what was done. A refusal of the admin function (no such workflow or
step, nothing failed to retry) is a 400 saying why; nothing was changed. None of these
routes exists in read-only mode.
"""

from __future__ import annotations

from bson import ObjectId
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from recruiter.admin.workflows import cancel_workflow, retry_workflow
from recruiter.web.app import Dashboard, Handler, HttpProblem
from recruiter.web.workflow_views import cancel_summary, object_id_of, retry_summary


def _workflow(form: FormData) -> ObjectId:
    raw = form.get("workflow")
    wid = object_id_of(raw) if isinstance(raw, str) else None
    if wid is None:
        raise HttpProblem(400, "workflow is missing or not a workflow id (24 hexadecimal digits)")
    return wid


def _step(form: FormData, limit: int) -> str | None:
    value = form.get("step")
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise HttpProblem(400, f"step must be a step's name of at most {limit} characters")
    return value


async def cancel(dash: Dashboard, request: Request) -> Response:
    form = await dash.checked_form(request)
    wid = _workflow(form)

    def do() -> str:
        try:
            done = cancel_workflow(dash.db, wid, dash.admin.now(), "workflow cancelled from the dashboard")
        except RuntimeError as exc:  # a step's job kept changing: the steps before it (dependents) are cancelled
            return f"not finished: {exc} (the steps cancelled before it stay cancelled: see the workflow's page)"
        return cancel_summary(done)

    return await dash.act(request, "cancel-workflow", str(wid), do, f"/workflows/{wid}")


async def retry(dash: Dashboard, request: Request) -> Response:
    form = await dash.checked_form(request)
    wid = _workflow(form)
    step = _step(form, dash.settings.limits.max_field)

    def do() -> str:
        return retry_summary(retry_workflow(dash.db, wid, dash.admin.now(), step))

    target = str(wid) if step is None else f"{wid} step {step}"
    return await dash.act(request, "retry-workflow", target, do, f"/workflows/{wid}")


ROUTES: list[tuple[str, Handler]] = [
    ("/actions/workflow-cancel", cancel),
    ("/actions/workflow-retry", retry),
]
