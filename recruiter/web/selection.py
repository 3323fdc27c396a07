"""Which jobs a bulk action takes: the rows ticked on a page, or every job matching a list's filters.

A list page's form sends the ids ticked (``id``, repeated), or ``all=matching`` with the
list's filters (``state``, ``group``, ``tenant``, ``class``, ``why``, ``tag``): the jobs
matching them, in the states the action takes, read a page at a time, newest first, at
most ``Limits.max_ids`` of them (the message says when more matched: act again, the
actions are idempotent).

Invariant: the filters are checked as the list page checks them (400, nothing read),
and the read is bounded (``max_ids`` jobs, pages of ``max_page``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.datastructures import FormData

from recruiter.domain.following import STATES
from recruiter.domain.outcome import MALFORMED
from recruiter.web import views
from recruiter.web.app import HttpProblem

if TYPE_CHECKING:
    from recruiter.web.app import Dashboard

RETRIABLE = ("archived",)
WAITING = ("queued", "delayed", "retrying", "assigned", "running")  # what a cancel takes
WAITING_UNLOCKED = ("queued", "delayed", "retrying")  # what a delete takes
TEXT_FILTERS = ("group", "tenant", "class", "why", "tag")


@dataclass(frozen=True)
class Selection:
    """The ids to act on, the audit entry's target, and a note the outcome starts with."""

    ids: list[str]
    target: str
    note: str = ""


def count_states(states: Iterable[str]) -> str:
    """``2 cancelled, 1 already-archived``: how many results of each state."""
    counts: dict[str, int] = {}
    for state in states:
        counts[state] = counts.get(state, 0) + 1
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))


def _filters(form: FormData, limit: int) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in TEXT_FILTERS:
        value = form.get(name)
        text = value.strip() if isinstance(value, str) else ""
        if len(text) > limit:
            raise HttpProblem(400, f"{name} is longer than {limit} characters")
        found[name] = text or None
    return found


def select(dash: Dashboard, form: FormData, takes: tuple[str, ...]) -> Selection:
    """The jobs matching the form's filters in the states of ``takes`` (in a worker thread: it reads)."""
    limits = dash.settings.limits
    asked = [s for s in form.getlist("state") if isinstance(s, str)]
    if any(s not in STATES for s in asked):
        raise HttpProblem(400, f"state must be one of {', '.join(STATES)}")
    states = [s for s in (asked or STATES) if s in takes]
    if not states:
        raise HttpProblem(400, f"no job in the states asked ({', '.join(asked)}) can take this action "
                               f"(it takes {', '.join(takes)}); nothing done")
    f = _filters(form, limits.max_field)
    described = " ".join([f"state={','.join(states)}", *(f"{k}={v}" for k, v in f.items() if v)])
    ids: list[str] = []
    quarantined = 0
    after = None
    more = False
    while len(ids) < limits.max_ids:
        try:
            page = dash.admin.jobs(states=states, group=f["group"], tenant=f["tenant"], class_name=f["class"],
                                   why=f["why"], tag=f["tag"], limit=min(limits.max_page, limits.max_ids - len(ids)),
                                   after=after)
        except ValueError as exc:
            raise HttpProblem(400, str(exc)) from None
        for v in page.views:
            if v.why == MALFORMED:
                quarantined += 1  # cannot be retried: left out rather than refusing the whole action
            else:
                ids.append(str(views.plain(v.id)))
        after, more = page.next, page.next is not None
        if after is None:
            break
    if not ids:
        raise HttpProblem(400, f"no job matches {described}; nothing done")
    note = f"{len(ids)} jobs matching {described}" + (" (the newest; more match: act again for the rest)"
                                                      if more else "")
    if quarantined:
        note += f", {quarantined} quarantined left out"
    return Selection(ids, f"{note}: {' '.join(ids)}", note + ": ")
