"""The dashboard's pages (GET): overview, jobs, one job, failures, history, workers, schedules, pause switches, audit.

Invariant: a page validates its query before reading (400 with a one-line reason,
nothing read), and each read is bounded: a page of at most ``Limits.max_page`` jobs,
the failures as the newest ``FAILURES_PER_REASON`` jobs of each failing reason, the
audit as its newest ``AUDIT_SHOWN`` entries. Counts made from such bounded reads say
that they are capped.
"""

from __future__ import annotations

import json
from typing import Any

from bson import ObjectId
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from recruiter.admin import OverviewQuery, overview_of
from recruiter.admin.overview import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE
from recruiter.admin.timeline import DEFAULT_RANGE, RANGES
from recruiter.domain.cancel import parse_job_id
from recruiter.domain.following import STATES, JobView
from recruiter.domain.listing import decode_page_key, encode_page_key
from recruiter.domain.visible import VALUE_BOUND
from recruiter.store import Page, recent_actions
from recruiter.web import charts, views
from recruiter.web.app import Dashboard, Handler, HttpProblem
from recruiter.web.workflow_views import tag_of

FAILURES_PER_REASON = 100
AUDIT_SHOWN = 100
DEFAULT_PAGE = 50
TEXT_FILTERS = ("group", "tenant", "class", "why", "tag")
RETRYING = "retrying"
STOP_POLLING = 286  # htmx's status for "stop polling this element"


async def overview(dash: Dashboard, request: Request) -> Response:
    query = _overview_query(request, dash)
    figures = await dash.read(dash.stats.get)
    return dash.page(request, "overview.html", figures=figures, nav="overview", history=list(dash.history),
                     view=overview_of(figures, query), href=views.OverviewLinks(query), max_page_size=MAX_PAGE_SIZE)


async def overview_live(dash: Dashboard, request: Request) -> Response:
    query = _overview_query(request, dash)
    figures = await dash.read(dash.stats.get)
    return dash.page(request, "overview_live.html", figures=figures, history=list(dash.history),
                     view=overview_of(figures, query), href=views.OverviewLinks(query))


def _overview_query(request: Request, dash: Dashboard) -> OverviewQuery:
    """The overview's query parameters (``q``, ``page``, ``size``, ``tenants``, ``workers``), checked."""
    cut = dash.settings.limits.max_field
    page, size, workers = _one(request, "page", 10), _one(request, "size", 10), _one(request, "workers", 10)
    if page is not None and not (page.isdigit() and int(page) >= 1):
        raise HttpProblem(400, "page must be a whole number from 1")
    if size is not None and not (size.isdigit() and 1 <= int(size) <= MAX_PAGE_SIZE):
        raise HttpProblem(400, f"size must be a whole number from 1 to {MAX_PAGE_SIZE}")
    if workers not in (None, "1"):
        raise HttpProblem(400, "workers must be 1 (list the @worker: groups) or absent")
    return OverviewQuery(name=_one(request, "q", cut), page=int(page) if page else 1,
                         size=int(size) if size else DEFAULT_PAGE_SIZE, tenants_of=_one(request, "tenants", cut),
                         worker_groups=workers == "1")


def _one(request: Request, name: str, limit: int) -> str | None:
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise HttpProblem(400, f"{name} is given {len(values)} times; give it once")
    value = values[0].strip() if values else ""
    if len(value) > limit:
        raise HttpProblem(400, f"{name} is longer than {limit} characters")
    return value or None


def _page_size(request: Request, max_page: int) -> int:
    text = _one(request, "limit", 10)
    if text is None:
        return DEFAULT_PAGE
    if not text.isdigit() or not 1 <= int(text) <= max_page:
        raise HttpProblem(400, f"limit must be a whole number from 1 to {max_page}")
    return int(text)


def _job_filters(request: Request, dash: Dashboard) -> dict[str, Any]:
    cut = dash.settings.limits.max_field
    states = request.query_params.getlist("state")
    if len(states) > len(STATES) or any(s not in STATES for s in states):
        raise HttpProblem(400, f"state must be one of {', '.join(STATES)}")
    filters: dict[str, Any] = {name: _one(request, name, cut) for name in TEXT_FILTERS}
    return {"states": tuple(dict.fromkeys(states)), **filters}


async def jobs(dash: Dashboard, request: Request) -> Response:
    limits = dash.settings.limits
    filters = _job_filters(request, dash)
    limit = _page_size(request, limits.max_page)
    query = _one(request, "q", limits.max_field)
    if query is not None:
        found = await _search(dash, query)
        if found is not None:
            return found
        filters["class"] = query
    after_token = _one(request, "after", 400)
    try:
        after = decode_page_key(after_token) if after_token else None
    except ValueError as exc:
        raise HttpProblem(400, str(exc)) from None
    args = {"group": filters["group"], "tenant": filters["tenant"], "class_name": filters["class"],
            "why": filters["why"], "tag": filters["tag"]}
    try:
        page: Page = await dash.read(lambda: dash.admin.jobs(states=filters["states"], limit=limit, after=after,
                                                             **args))
    except ValueError as exc:
        raise HttpProblem(400, str(exc)) from None
    next_token = encode_page_key(page.next) if page.next is not None else None
    return dash.page(request, "jobs.html", nav="jobs", page=page, filters=filters, limit=limit, all_states=STATES,
                     next_token=next_token, query=query, more_query=_without(request, "after"),
                     here=_here(request))


async def _search(dash: Dashboard, query: str) -> Response | None:
    """A job id goes to its page (404 if there is none); ``module:Class`` filters by class; else 400."""
    if ":" in query:
        return None
    try:
        job_id = parse_job_id(query)
    except ValueError:
        raise HttpProblem(400, f"search {query!r}: give a job id, or a class as module:Qualname") from None
    view = await dash.read(lambda: dash.admin.job(job_id))
    if view is None:
        raise HttpProblem(404, f"no job {query}")
    return RedirectResponse(f"/jobs/{views.plain(view.id)}", status_code=303)


def _here(request: Request) -> str:
    """This page's path and query: where a bulk action on its rows comes back to."""
    return request.url.path + (f"?{request.url.query}" if request.url.query else "")


def _without(request: Request, name: str) -> str:
    from urllib.parse import urlencode
    return urlencode([(k, v) for k, v in request.query_params.multi_items() if k != name])


async def _job_view(dash: Dashboard, request: Request) -> JobView:
    raw = request.path_params["job_id"]
    try:
        job_id: ObjectId | str = parse_job_id(raw) if len(raw) <= 200 else ""
    except ValueError:
        job_id = ""
    view = await dash.read(lambda: dash.admin.job(job_id)) if job_id else None
    if view is None:
        raise HttpProblem(404, f"no job {raw[:60]}")
    return view


async def job(dash: Dashboard, request: Request) -> Response:
    view = await _job_view(dash, request)
    return dash.page(request, "job.html", nav="jobs", job=view, runs=views.executions(view),
                     parameters=views.shown(views.parameters(view)), result=views.shown(views.plain(view.result)),
                     waiting=await _waiting(dash, view), value_bound=VALUE_BOUND, now=await dash.read(dash.admin.now),
                     workflow=tag_of(view.document))


async def job_live(dash: Dashboard, request: Request) -> Response:
    """The live part of a job's page; once the job is archived, status 286 tells htmx to stop polling."""
    view = await _job_view(dash, request)
    return dash.page(request, "job_live.html", STOP_POLLING if view.finished else 200, job=view,
                     runs=views.executions(view), parameters=views.shown(views.parameters(view)),
                     result=views.shown(views.plain(view.result)), waiting=await _waiting(dash, view))


async def job_document(dash: Dashboard, request: Request) -> Response:
    """The job's whole document as JSON (read-only): the values its page cuts, whole.

    Served as ``application/json`` with ``nosniff`` (a browser never renders it as a page);
    every control, bidirectional and non-ASCII character is written as a JSON escape
    (``ensure_ascii``), so nothing in it is interpreted.
    """
    view = await _job_view(dash, request)
    return Response(json.dumps(views.plain(view.document), ensure_ascii=True), media_type="application/json")


async def _waiting(dash: Dashboard, view: JobView) -> str | None:
    """What a waiting job waits for, in one line (``recruiter jobs explain``); None once it runs or ended."""
    if view.finished or not isinstance(view.id, ObjectId):
        return None
    job_id = view.id
    explained = await dash.read(lambda: dash.admin.explain(job_id))
    return explained.text if explained is not None and explained.waiting else None


def _failures(dash: Dashboard, reasons: tuple[str, ...], exact: bool
              ) -> tuple[list[views.FailureGroup], dict[str, bool]]:
    """One bounded read per reason (an archived why, or ``retrying``: the jobs waiting for a retry)."""
    archived: list[JobView] = []
    retrying: list[JobView] = []
    capped: dict[str, bool] = {}
    for reason in reasons:
        if reason == RETRYING:
            page = dash.admin.jobs(states=(RETRYING,), limit=FAILURES_PER_REASON)
            retrying.extend(page.views)
        else:
            page = dash.admin.jobs(why=reason, limit=FAILURES_PER_REASON)
            archived.extend(page.views)
        capped[reason] = page.next is not None
    return views.group_failures(archived, retrying, exact=exact), capped


async def failures(dash: Dashboard, request: Request) -> Response:
    reason = _one(request, "reason", dash.settings.limits.max_field)
    choices = (*views.FAILURE_WHYS, RETRYING)
    if reason is not None and reason not in choices:
        raise HttpProblem(400, f"reason must be one of {', '.join(choices)}")
    reasons = choices if reason is None else (reason,)
    by = _one(request, "by", 10) or "pattern"  # group by message pattern, or the exact message
    if by not in ("pattern", "exact"):
        raise HttpProblem(400, "by must be pattern or exact")
    groups, capped = await dash.read(lambda: _failures(dash, reasons, by == "exact"))
    return dash.page(request, "failures.html", nav="failures", groups=groups, capped=capped,
                     per_reason=FAILURES_PER_REASON, reason=reason, choices=choices, by=by)


async def history(dash: Dashboard, request: Request) -> Response:
    """Jobs done, failed and their wait over time, as the leader wrote them (``timeline``): one read."""
    range_name = _one(request, "range", 10) or DEFAULT_RANGE
    if range_name not in RANGES:
        raise HttpProblem(400, f"range must be one of {', '.join(RANGES)}")
    group = _one(request, "group", dash.settings.limits.max_field)
    found = await dash.read(lambda: dash.admin.history(range_name, group))
    return dash.page(request, "history.html", nav="history", history=found, charts=charts.history_charts(found),
                     ranges=list(RANGES))


async def workers(dash: Dashboard, request: Request) -> Response:
    found = await dash.read(dash.admin.workers)
    return dash.page(request, "workers.html", nav="workers", workers=found)


async def schedules(dash: Dashboard, request: Request) -> Response:
    listing = await dash.read(dash.admin.schedules)
    return dash.page(request, "schedules.html", nav="schedules", listing=listing)


async def switches(dash: Dashboard, request: Request) -> Response:
    paused = await dash.read(dash.admin.paused)
    leases = await dash.read(dash.admin.leases)
    limits = await dash.read(dash.admin.limits)
    return dash.page(request, "switches.html", nav="switches", paused=paused, leases=leases, flow=limits)


async def audit(dash: Dashboard, request: Request) -> Response:
    entries = await dash.read(lambda: recent_actions(dash.db, AUDIT_SHOWN))
    return dash.page(request, "audit.html", nav="audit", entries=entries, shown=AUDIT_SHOWN)


ROUTES: list[tuple[str, Handler]] = [
    ("/", overview),
    ("/overview/live", overview_live),
    ("/jobs", jobs),
    ("/jobs/{job_id}", job),
    ("/jobs/{job_id}/live", job_live),
    ("/jobs/{job_id}/document", job_document),
    ("/failures", failures),
    ("/history", history),
    ("/workers", workers),
    ("/schedules", schedules),
    ("/switches", switches),
    ("/audit", audit),
]
