"""The ready jobs a leader knows without reading: groups a round read whole, and the jobs enqueued since.

An idle leader woken by an enqueue reads, in the usual round, the pause switches and every
substream of the job's group (five or six reads) to find the one job the doorbell's event
already carried. :class:`KnownJobs` lets that round answer its candidate queries from memory:

- **Whole groups.** Every round asks each group its free workers name for its ring of
  tenants from the start (``Query(group=G)``). When that read returns fewer rows than it
  asked, those rows were every ready job of ``G`` (paused tenants aside); once the round has
  committed, they less the jobs it handed out are what ``G`` holds (:meth:`KnownJobs.committed`).
- **Arrivals.** The doorbell (:class:`recruiter.store.doorbell.Doorbell`) keeps the documents of
  the jobs inserted since (an insert event carries the whole document); those of a known group
  join it (:meth:`KnownJobs.arrive`).
- **Answers.** A round woken by enqueues alone answers a query on a known group from those
  documents, in index order (:meth:`KnownJobs.answer`): the rows the read would return.

What makes the knowledge void (:meth:`KnownJobs.forget`): any other change to ``scheduled`` the
doorbell reports (an update that is not a lock, a replace: unlocks, resubmits, edits), the
doorbell's stream (re)opened or failed (events may have been missed), a job document that is
not well formed, a new leadership. Jobs that become due by the clock raise no event: a group is
known for at most ``max_age_s`` after its read (the idle leader's longest wait), so such a job
waits no longer than it would for an idle leader's next round.

Invariant: this is only ever a hint. A job known here but locked, changed or gone since is
found out by the round's lock, which is conditional (``locked: false`` and the attempt count
read): the round then hands it to no one, forgets everything and runs again at once
(:meth:`recruiter.processes.recruiter.RecruiterProcess.fenced_round`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from recruiter.domain.candidates import Query
from recruiter.domain.control import Paused
from recruiter.domain.documents import check_job
from recruiter.store.candidate_keys import LOW_ONLY, is_ready, row_order, tenant_of
from recruiter.store.layout import Document

MAX_AGE_S = 1.0
# Past this many arrivals between two rounds (a burst, a batch), the round reads as usual.
MAX_ARRIVALS = 256


def _whole_group(q: Query) -> bool:
    """A query for every ready job of one group: its ring of tenants from the start."""
    return q.group is not None and q.tenant is None and q.tenant_after is None and not q.lows_only and q.skip == 0


def _matches(q: Query, doc: Document, now: datetime, paused: Paused) -> bool:
    tenant = tenant_of(doc)
    if not is_ready(doc, now):
        return False
    if q.tenant is not None:  # one tenant's stream, as asked (a ring leaves paused tenants out)
        if tenant != q.tenant:
            return False
    elif tenant in paused.tenants:
        return False
    if q.tenant_after is not None and not (isinstance(doc.get("tenant"), str) and tenant > q.tenant_after):
        return False  # strings after it only: the default tenant sorts first, never "after" anything
    return not q.lows_only or (str(doc.get("status")), str(doc.get("priority"))) in LOW_ONLY


@dataclass
class KnownGroup:
    read_at: float  # monotonic time of the read that found every ready job of the group
    jobs: dict[object, Document] = field(default_factory=dict)


@dataclass
class KnownJobs:
    """What one leader knows of the ready jobs of some groups between rounds (see the module doc)."""

    max_age_s: float = MAX_AGE_S
    clock: Callable[[], float] = time.monotonic
    groups: dict[str, KnownGroup] = field(default_factory=dict)
    # Groups this round's reads found whole, taken as known once the round commits.
    pending: dict[str, KnownGroup] = field(default_factory=dict)
    answered: int = 0  # queries answered from memory (for the tests and the benchmarks)

    def forget(self) -> None:
        self.groups.clear()
        self.pending.clear()

    def arrive(self, docs: Iterable[Document]) -> None:
        """Jobs inserted since the last round (the doorbell's insert events), as inserted."""
        docs = list(docs)
        if len(docs) > MAX_ARRIVALS:
            self.forget()
            return
        for doc in docs:
            if doc.get("locked") is not False or check_job(doc) is not None or not isinstance(doc.get("group"), str):
                self.forget()  # not a plain new job: the next rounds read (and quarantine what is malformed)
                return
            known = self.groups.get(doc["group"])
            if known is not None:
                known.jobs[doc["_id"]] = doc

    def answer(self, q: Query, now: datetime, paused: Paused) -> list[Document] | None:
        """The rows ``q`` would read, from memory; None when its group is not known (or no longer)."""
        if q.group is None or (known := self.groups.get(q.group)) is None:
            return None
        if self.clock() - known.read_at > self.max_age_s:
            del self.groups[q.group]
            return None
        rows = sorted((d for d in known.jobs.values() if _matches(q, d, now, paused)), key=row_order)
        self.answered += 1
        return rows[q.skip:q.skip + q.limit]

    def observed(self, q: Query, rows: list[Document], read_at: float, *, short: bool) -> None:
        """A query was read (not answered from memory): ``rows``, its well-formed rows as whole
        documents; ``short``, whether it returned fewer rows than it asked (so it read them all)."""
        if _whole_group(q) and short and q.group is not None:
            self.pending[q.group] = KnownGroup(read_at, {d["_id"]: d for d in rows if d.get("_id") is not None})

    def committed(self, handed_out: Iterable[object], *, whole: bool = True) -> None:
        """The round committed, handing out ``handed_out`` (job ids): what it read whole is known.
        A reading round (``whole``) replaces what was known: every group known is then as of the
        last reading round or later, as the doorbell's skipping of older events assumes
        (``seen_until`` of :class:`recruiter.store.doorbell.Doorbell`); a quiet round adds to it."""
        if whole:
            self.groups = dict(self.pending)
        else:
            self.groups.update(self.pending)
        self.pending.clear()
        gone = set(handed_out)
        for known in self.groups.values():
            for job_id in gone & known.jobs.keys():
                del known.jobs[job_id]

    def abandoned(self) -> None:
        self.pending.clear()

