"""The dashboard as an ASGI application: pages that render the read model, and the operator's actions.

Every page reads through :class:`recruiter.admin.Admin` (in a worker thread: the read
model is synchronous), and every action writes through it too, then records an
entry in the ``audit`` collection (:mod:`recruiter.store`'s ``record_action``).

Invariants:

- a request whose ``Host`` is not a name the dashboard serves is refused (400), and one
  not authenticated (401), before anything is read (:class:`Guard`); a POST from another
  origin (its ``Origin``, or ``Sec-Fetch-Site``) is refused (403) before its form is read,
  and one whose CSRF token is not its session's is refused (403) before its form is used;
  in read-only mode no action route exists at all;
- every value a template prints goes through :func:`recruiter.web.views.finalize`: its
  control and bidirectional characters shown escaped, cut at ``VALUE_BOUND`` characters
  (a form's hidden value says ``| exact`` to be sent back as it was read);
- the overview's figures are read at most once per ``refresh_s`` whatever the number
  of open tabs (:class:`Cached`), and every listing is a bounded page;
- no secret reaches a page or a log line: errors show their class only, and log
  their first line with the secrets given in :class:`Settings` masked.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import structlog
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from recruiter.admin import Admin, Stats
from recruiter.domain.schedule_view import outcome_of
from recruiter.store import AuditEntry, StoreError, SyncDb, ensure_audit_index, record_action
from recruiter.web import views
from recruiter.web.security import CSRF_FIELD, REALM, SESSION_COOKIE, Access, Csrf, Hosts, Limits

HERE = Path(__file__).parent
HISTORY = 180  # points of the overview's charts: 6 minutes at the default refresh
FLASH_COOKIE = "recruiter_flash"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
T = TypeVar("T")
log = structlog.get_logger("recruiter.web")
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class HttpProblem(Exception):
    """A request refused with ``status`` and a one-line reason, shown as the page."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Settings:
    """How the dashboard behaves: read-only or not, who may use it, its bounds, its refresh period."""

    read_only: bool = False
    access: Access = field(default_factory=Access)
    limits: Limits = field(default_factory=Limits)
    hosts: Hosts = field(default_factory=Hosts)  # the names it answers for (loopback by default)
    refresh_s: float = 2.0
    database: str = ""  # what the header shows: the target without credentials
    hidden: tuple[str, ...] = field(default=(), repr=False)  # masked in log lines (the URI's password...)

    def mask(self, text: str) -> str:
        for secret in self.hidden:
            if secret:
                text = text.replace(secret, "***")
        return text


class Cached(Generic[T]):
    """A value read at most once per period, one read at a time, whatever the number of callers.

    The period is ``ttl_s``, or ``DUTY`` times as long as the last read took if that is
    longer: a read that takes 10 s on a loaded server is made at most every 40 s, so the
    dashboard never keeps the server busy more than a fifth of the time. While a read
    runs, callers get the previous value at once (its time says how old it is); only
    the very first read makes them wait, and share it.
    """

    DUTY = 4.0

    def __init__(self, load: Callable[[], T], ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._load, self._ttl_s, self._clock = load, ttl_s, clock
        self._ready = threading.Condition()
        self._value: T | None = None
        self._at = -float("inf")
        self._took = 0.0
        self._loading = False
        self.loads = 0

    @property
    def period_s(self) -> float:
        """The time between two reads now: ``ttl_s``, or ``DUTY`` times the last read's duration."""
        return max(self._ttl_s, self.DUTY * self._took)

    def get(self) -> T:
        with self._ready:
            while True:
                current = self._value
                if current is not None and (self._loading or self._clock() - self._at < self.period_s):
                    return current
                if not self._loading:
                    break
                self._ready.wait()  # the first read, made by another caller
            self._loading = True
        began = self._clock()
        try:
            value = self._load()
        except BaseException:
            with self._ready:
                self._loading = False
                self._ready.notify_all()
            raise
        with self._ready:
            self._value, self._at, self._took = value, self._clock(), self._clock() - began
            self._loading = False
            self.loads += 1
            self._ready.notify_all()
            return value

    def invalidate(self) -> None:
        """The next call reads again (after an action: the figures it changed)."""
        with self._ready:
            self._at = -float("inf")
            self._took = 0.0


class Guard(BaseHTTPMiddleware):
    """The request's host, origin, authentication and bounds, then security headers, before any route runs."""

    def __init__(self, app: Any, settings: Settings) -> None:
        super().__init__(app)
        self.settings = settings

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        limits, hosts = self.settings.limits, self.settings.hosts
        response: Response
        if not hosts.serves(request.headers.get("host")):
            # DNS rebinding: another site's name resolved to this address. Nothing else is said.
            response = PlainTextResponse("unknown host: this dashboard serves other names (--allowed-host)", 400)
        elif request.method not in SAFE_METHODS and not hosts.same_origin(request.headers.get("origin"),
                                                                          request.headers.get("sec-fetch-site")):
            response = PlainTextResponse("refused: this request comes from another site's page", 403)
        elif len(request.scope.get("query_string", b"")) > limits.max_query:
            response = PlainTextResponse(f"query string longer than {limits.max_query} characters", 414)
        else:
            who = self.settings.access.identify(request.headers.get("authorization"))
            if who is None:
                response = PlainTextResponse("authentication required", 401, headers={"WWW-Authenticate": REALM})
            elif _body_too_long(request, limits.max_body):
                response = PlainTextResponse(f"request body larger than {limits.max_body} bytes", 413)
            else:
                request.state.who = who
                response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response


def _body_too_long(request: Request, limit: int) -> bool:
    length = request.headers.get("content-length")
    if length is None:
        return request.method == "POST" and "chunked" in request.headers.get("transfer-encoding", "")
    return not length.isdigit() or int(length) > limit


class Dashboard:
    """The routes' state: the read model, the templates, the CSRF key, the cached figures."""

    def __init__(self, db: SyncDb, settings: Settings, csrf: Csrf | None = None) -> None:
        self.admin = Admin(db)
        self.db = db
        self.settings = settings
        self.csrf = csrf or Csrf()
        self.stats = Cached(self._read_stats, settings.refresh_s)
        # The charts: one point per read of the figures (no read of their own), the last HISTORY of them.
        self.history: deque[views.Point] = deque(maxlen=HISTORY)
        self.env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]),
                               finalize=views.finalize)
        self.env.filters.update(exact=views.exact, age=views.age, number=views.number,
                                percent=views.percent, when=views.when,
                                plain=views.plain, as_json=views.as_json, state=views.state_of, halt=views.halt)
        self.env.globals.update(outcome_of=outcome_of, sparkline=views.sparkline)

    def _read_stats(self) -> Stats:
        figures = self.admin.stats()
        self.history.append(views.point_of(figures.at, figures.groups))
        return figures

    # -- rendering -----------------------------------------------------------------------------

    def page(self, request: Request, template: str, status: int = 200, **context: Any) -> Response:
        """The template rendered with the common context; starts a session (its cookie) when the request has none."""
        cookie = request.cookies.get(SESSION_COOKIE)
        session = cookie if cookie is not None and self.csrf.is_session(cookie) else self.csrf.new_session()
        token = self.csrf.token(session)
        flash = _read_flash(request.cookies.get(FLASH_COOKIE))
        html = self.env.get_template(template).render(
            request=request, csrf=token, csrf_field=CSRF_FIELD, read_only=self.settings.read_only,
            who=getattr(request.state, "who", "anonymous"), database=self.settings.database,
            refresh_s=self.settings.refresh_s, flash=flash, limits=self.settings.limits, **context)
        response = HTMLResponse(html, status)
        if session != cookie:
            response.set_cookie(SESSION_COOKIE, session, httponly=True, samesite="strict", path="/")
        if flash is not None:
            response.delete_cookie(FLASH_COOKIE, path="/")
        return response

    def problem(self, request: Request, exc: HttpProblem) -> Response:
        return self.page(request, "problem.html", exc.status, message=exc.message, code=exc.status)

    async def read(self, fn: Callable[[], T]) -> T:
        return await run_in_threadpool(fn)

    # -- actions -------------------------------------------------------------------------------

    async def checked_form(self, request: Request) -> FormData:
        """The POST's form, once its CSRF token is its session's (403 otherwise: nothing is done)."""
        # A malformed form, or one with too many fields, is Starlette's own 400.
        form = await request.form(max_files=0, max_fields=self.settings.limits.max_ids + 10)
        submitted = form.get(CSRF_FIELD)
        if not self.csrf.accepts(request.cookies.get(SESSION_COOKIE),
                                 submitted if isinstance(submitted, str) else None):
            raise HttpProblem(403, "the form's CSRF token is missing or wrong: reload the page and try again")
        return form

    async def act(self, request: Request, action: str, target: str, do: Callable[[], str],
                  back: str | Callable[[], str]) -> Response:
        """Run ``do`` (it returns the outcome, or raises ValueError: refused, nothing done), audit it, go ``back``."""
        try:
            outcome = await self.read(do)
        except ValueError as exc:
            raise HttpProblem(400, str(exc)) from None
        self.stats.invalidate()
        client = request.client.host if request.client else "-"
        who = getattr(request.state, "who", "anonymous")

        def audit() -> AuditEntry:
            entry = AuditEntry(self.admin.now(), who, action, target, client, outcome)
            record_action(self.db, entry)
            return entry

        entry = await self.read(audit)
        log.info("dashboard.action", who=entry.who, action=action, target=target[:200], client=client,
                 outcome=outcome[:200])
        return redirect(request, back if isinstance(back, str) else back(), f"{action} {target[:120]}: {outcome}")


def redirect(request: Request, to: str, flash: str | None = None) -> Response:
    """After an action: htmx follows ``HX-Redirect``, a plain form post a 303."""
    response: Response
    if request.headers.get("hx-request") == "true":
        response = Response(status_code=200, headers={"HX-Redirect": to})
    else:
        response = RedirectResponse(to, status_code=303)
    if flash is not None:
        value = base64.urlsafe_b64encode(json.dumps(flash[:400]).encode()).decode()
        response.set_cookie(FLASH_COOKIE, value, httponly=True, samesite="strict", path="/", max_age=60)
    return response


def _read_flash(value: str | None) -> str | None:
    if not value or len(value) > 2000:
        return None
    try:
        text = json.loads(base64.urlsafe_b64decode(value.encode()))
    except ValueError:
        return None
    return text if isinstance(text, str) else None


def local_path(value: object, default: str) -> str:
    """Where to go back after an action: a path of this site only (no open redirect)."""
    if isinstance(value, str) and value.startswith("/") and not value.startswith("//") and "\\" not in value \
            and len(value) <= 2000:
        return value
    return default


Handler = Callable[[Dashboard, Request], Awaitable[Response]]


async def _read_only(dash: Dashboard, request: Request) -> Response:
    raise HttpProblem(403, "this dashboard is read-only (--read-only): it takes no action")


def create_app(db: SyncDb, settings: Settings | None = None, *, csrf: Csrf | None = None) -> Starlette:
    """The dashboard on ``db`` (creates the ``audit`` collection's index unless read-only)."""
    from recruiter.web import actions, pages, workflow_actions, workflow_pages

    settings = settings or Settings()
    dash = Dashboard(db, settings, csrf)
    if not settings.read_only:
        ensure_audit_index(db)

    def bind(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return await handler(dash, request)
            except HttpProblem as exc:
                return dash.problem(request, exc)
            except StoreError as exc:
                log.warning("dashboard.database_error", error=type(exc).__name__, message=settings.mask(str(exc))[:300])
                return dash.problem(request, HttpProblem(503, f"the database did not answer ({type(exc).__name__})"))
        return endpoint

    gets, posts = [*pages.ROUTES, *workflow_pages.ROUTES], [*actions.ROUTES, *workflow_actions.ROUTES]
    routes: list[Route | Mount] = [Route(path, bind(h), methods=["GET"]) for path, h in gets]
    if settings.read_only:
        routes += [Route(path, bind(_read_only), methods=["POST"]) for path, _ in posts]
    else:
        routes += [Route(path, bind(h), methods=["POST"]) for path, h in posts]
    routes.append(Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"))

    async def server_error(request: Request, exc: Exception) -> Response:
        log.error("dashboard.error", error=type(exc).__name__, message=settings.mask(str(exc))[:300])
        return PlainTextResponse(f"internal error ({type(exc).__name__}); see the dashboard's log", 500)

    app = Starlette(routes=routes, middleware=[Middleware(Guard, settings=settings)],
                    exception_handlers={Exception: server_error})
    app.state.dashboard = dash
    return app
