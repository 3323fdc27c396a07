"""The dashboard's actions (POST): retry, cancel, retry now, delete, stop a worker, run/pause/resume a
schedule, pause/resume names.

Invariant: each handler first gets its form through :meth:`Dashboard.checked_form`
(403 without a valid CSRF token: nothing read, nothing written), checks every
value (400 with a one-line reason, nothing written), then acts through the read
model and records one audit entry (:meth:`Dashboard.act`). None of these routes
exists in read-only mode. The job actions take ids (a page's ticked rows) or
``all=matching`` with a list's filters (:mod:`recruiter.web.selection`), and are
idempotent: a second submit writes nothing and its message says so ("already
retried as", "already archived", "already due").
"""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from recruiter.domain.cancel import RUNS_ON, WAS_ASSIGNED, parse_job_id
from recruiter.web import views
from recruiter.web.app import Dashboard, Handler, HttpProblem, local_path
from recruiter.web.selection import RETRIABLE, WAITING, WAITING_UNLOCKED, Selection, count_states, select

KINDS = ("group", "tenant")
SCHEDULE_OPS = ("run-now", "pause", "resume")


def _field(form: FormData, name: str, limit: int) -> str:
    value = form.get(name)
    if not isinstance(value, str) or not value.strip():
        raise HttpProblem(400, f"{name} is missing")
    if len(value) > limit:
        raise HttpProblem(400, f"{name} is longer than {limit} characters")
    return value.strip()


def _ids(dash: Dashboard, form: FormData) -> list[str]:
    raw = [v for v in form.getlist("id") if isinstance(v, str)]
    if not raw:
        raise HttpProblem(400, "no job id given")
    if len(raw) > dash.settings.limits.max_ids:
        raise HttpProblem(400, f"more than {dash.settings.limits.max_ids} job ids in one action")
    for value in raw:
        try:
            parse_job_id(value)
        except ValueError as exc:
            raise HttpProblem(400, str(exc)) from None
    return list(dict.fromkeys(raw))


def _target(ids: list[str]) -> str:
    return ids[0] if len(ids) == 1 else f"{len(ids)} jobs: {' '.join(ids)}"


async def _selected(dash: Dashboard, request: Request, form: FormData, states: tuple[str, ...]) -> Selection:
    """The ids ticked, or with ``all=matching`` those of the jobs matching the form's filters in ``states``."""
    if form.get("all") == "matching":
        return await dash.read(lambda: select(dash, form, states))
    ids = _ids(dash, form)
    return Selection(ids, _target(ids))


async def retry(dash: Dashboard, request: Request) -> Response:
    form = await dash.checked_form(request)
    chosen = await _selected(dash, request, form, RETRIABLE)
    back = local_path(form.get("back"), "/failures")
    copies: list[str] = []

    def do() -> str:
        retried = dash.admin.retry(chosen.ids)
        copies.extend(str(views.plain(j.id)) for j in (*retried.jobs, *retried.already))
        return chosen.note + retried.describe()

    return await dash.act(request, "retry", chosen.target, do,
                          lambda: f"/jobs/{copies[0]}" if len(copies) == 1 and len(chosen.ids) == 1 else back)


# How a bulk cancel's summary names the states a job can be left in (recruiter.domain.cancel).
CANCEL_STATES = {WAS_ASSIGNED: "halted by their workers (slots held until stopped)",
                 RUNS_ON: "still running in a thread until they return (slots held until then)"}


async def cancel(dash: Dashboard, request: Request) -> Response:
    form = await dash.checked_form(request)
    chosen = await _selected(dash, request, form, WAITING)
    back = local_path(form.get("back"), "/failures")

    def do() -> str:
        results = dash.admin.cancel(chosen.ids, reason="cancelled from the dashboard")
        if len(results) == 1:
            # What really happened (halted, or running on in its thread), after the id the message names already.
            return chosen.note + results[0].describe().removeprefix(f"{results[0].job_id}: ")
        return chosen.note + count_states([CANCEL_STATES.get(r.state, r.state) for r in results])

    return await dash.act(request, "cancel", chosen.target, do, back)


async def retry_now(dash: Dashboard, request: Request) -> Response:
    form = await dash.checked_form(request)
    ids = _ids(dash, form)
    back = local_path(form.get("back"), "/jobs")

    def do() -> str:
        results = dash.admin.retry_now(ids)
        return results[0].describe() if len(results) == 1 else count_states([r.state for r in results])

    return await dash.act(request, "retry-now", _target(ids), do, back)


async def delete(dash: Dashboard, request: Request) -> Response:
    form = await dash.checked_form(request)
    chosen = await _selected(dash, request, form, WAITING_UNLOCKED)
    back = local_path(form.get("back"), "/jobs")

    def do() -> str:
        results = dash.admin.delete(chosen.ids, reason="deleted from the dashboard")
        if len(results) == 1:
            return chosen.note + results[0].describe()
        return chosen.note + count_states([r.state for r in results])

    return await dash.act(request, "delete", chosen.target, do, back)


async def stop_worker(dash: Dashboard, request: Request) -> Response:
    form = await dash.checked_form(request)
    worker = _field(form, "worker", dash.settings.limits.max_field)

    def do() -> str:
        asked = dash.admin.stop_workers([worker])
        if not asked:
            raise ValueError(f"no worker {worker} (it may have stopped already)")
        return "asked to stop"

    return await dash.act(request, "stop-worker", worker, do, "/workers")


async def schedule(dash: Dashboard, request: Request) -> Response:
    form = await dash.checked_form(request)
    name = _field(form, "name", dash.settings.limits.max_field)
    op = _field(form, "op", 20)
    if op not in SCHEDULE_OPS:
        raise HttpProblem(400, f"op must be one of {', '.join(SCHEDULE_OPS)}")
    call = {"run-now": dash.admin.run_schedule_now, "pause": dash.admin.pause_schedule,
            "resume": dash.admin.resume_schedule}[op]

    def do() -> str:
        change = call(name)
        if change.value == "unknown":
            raise ValueError(f"no schedule named {name!r}")
        return change.value

    return await dash.act(request, f"schedule-{op}", name, do, "/schedules")


def _kind(form: FormData) -> str:
    kind = form.get("kind")
    if kind not in KINDS:
        raise HttpProblem(400, "kind must be group or tenant")
    return str(kind)


async def pause(dash: Dashboard, request: Request) -> Response:
    form = await dash.checked_form(request)
    kind, name = _kind(form), _field(form, "name", dash.settings.limits.max_field)
    force = form.get("force") == "yes"

    def do() -> str:
        switched = dash.admin.pause(kind, [name], force=force)
        return "paused" + (" (no job or worker uses it yet)" if switched.unused else "")

    return await dash.act(request, f"pause-{kind}", name, do, local_path(form.get("back"), "/switches"))


async def resume(dash: Dashboard, request: Request) -> Response:
    form = await dash.checked_form(request)
    kind, name = _kind(form), _field(form, "name", dash.settings.limits.max_field)

    def do() -> str:
        switched = dash.admin.resume(kind, [name])
        return "was not paused" if switched.not_paused else "resumed"

    return await dash.act(request, f"resume-{kind}", name, do, local_path(form.get("back"), "/switches"))


ROUTES: list[tuple[str, Handler]] = [
    ("/actions/retry", retry),
    ("/actions/cancel", cancel),
    ("/actions/retry-now", retry_now),
    ("/actions/delete", delete),
    ("/actions/stop-worker", stop_worker),
    ("/actions/schedule", schedule),
    ("/actions/pause", pause),
    ("/actions/resume", resume),
]
