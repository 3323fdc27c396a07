"""The start gate of a rate limit: the window bound, held on the starts the workers record; pure, no I/O.

The leader paces the hand-outs of a rate-limited group (:mod:`recruiter.domain.pacing`), but a
worker starts a job a variable latency after its start time, so two starts can bunch. The gate
closes that gap: before a worker starts a job handed out under a rate, it takes a *start token*
with one conditional write on the group's gate document (``start_gates``,
``{_id: "gate:<group>"}``), which keeps, for each rate-limited key of the group (the group, and
each tenant with a rate of its own), the times of the starts in its last window: a sliding-window
log. The write grants the token only while fewer than ``entries`` of those times lie within the
last ``window`` (half-open); it then appends the server's time of the write (``$$NOW``, one value
for every key the job counts against; or the latest time in its logs, if later, so that each log
only grows in time) and drops the times older than the window. The job's recorded start
(``started_at`` of its execution) is that same time. So:

- the recorded starts of the jobs that took a token never exceed ``entries`` in any half-open
  window of ``window``, whatever the number of workers and processes: the log is one document,
  and each grant is one atomic write checked against it. A rate ``N/interval`` with burst B has
  ``N + B`` starts per interval (:func:`gate_of`); a log longer than :data:`MAX_ENTRIES` is kept
  as ``k`` starts per ``interval × k / (N + B)``, ``k`` dividing ``N + B`` (any window of one
  interval is then ``(N + B) / k`` of those, so it still holds at most ``N + B``).
- one clock: every time in the log, and every recorded start of a gated job, is the server's
  (``$$NOW`` of the gate write), so clock skew between the workers' machines moves nothing; the
  worker starts the job as soon as the write answers (its round trip later).
- a refused worker waits until the window frees, computed from the stored times
  (:func:`free_at`), and asks again; it never starts without a token, and holds its assignment
  meanwhile (a stop gives the job back, unstarted).
- a malformed log (not an array of dates, or a time ahead of the server's clock by more than the
  window: a hand edit, a clock stepped back) is repaired by the same write, full as of now (no start
  for one window: fail closed, never a burst that was not earned); the reply names the problem.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from recruiter.domain.control import escape
from recruiter.domain.pacing import Key, Rate

# What a copy handed out under a rate carries: the gates its worker takes a token from.
GATE_FIELD = "start_gate"
GATE_ID_PREFIX = "gate:"
# The longest log kept for one key (a longer one is kept as a shorter log over a shorter window).
MAX_ENTRIES = 100


@dataclass(frozen=True)
class Gate:
    """The gate of one rate-limited key: at most ``entries`` starts in any window of ``window_ms``."""

    group: str
    tenant: str | None  # None: the group's own rate
    entries: int
    window_ms: int

    @property
    def key(self) -> Key:
        return self.group, self.tenant

    @property
    def path(self) -> str:
        """Where its log lives in the group's gate document."""
        return "s" if self.tenant is None else f"tenants.{escape(self.tenant)}"

    @property
    def window(self) -> timedelta:
        return timedelta(milliseconds=self.window_ms)

    def document(self) -> list[object]:
        return [self.group, self.tenant, self.entries, self.window_ms]


def gate_of(key: Key, rate: Rate) -> Gate:
    """The gate that keeps ``rate`` (``N + B`` starts per interval) on the recorded starts."""
    total = rate.count + rate.burst
    entries = max(k for k in range(1, min(total, MAX_ENTRIES) + 1) if total % k == 0)
    # Rounded up to the millisecond (the server's dates): a longer window only holds more back.
    window_ms = max(1, math.ceil(rate.per_s * 1000 * entries / total - 1e-9))
    return Gate(key[0], key[1], entries, window_ms)


def gates_for(keys: Sequence[Key], rates: Mapping[Key, Rate]) -> list[Gate]:
    """The gates of a job counted against ``keys`` (its group's and its tenant's): one per rate."""
    return [gate_of(k, rates[k]) for k in keys if k in rates]


def gate_id(group: str) -> str:
    """The ``_id`` of a group's gate document in ``metadata``."""
    return GATE_ID_PREFIX + escape(group)


def spec_document(gates: Sequence[Gate]) -> list[object]:
    return [g.document() for g in gates]


def read_spec(raw: object) -> tuple[list[Gate], str | None]:
    """The gates a copy names (untrusted: a roster entry may be edited by hand), or what is wrong.
    Every gate of one job is of one group (the job's)."""
    if not isinstance(raw, list) or not raw:
        return [], f"{GATE_FIELD}: expected a list of gates"
    gates = []
    for item in raw:
        if not (isinstance(item, list) and len(item) == 4 and isinstance(item[0], str)
                and (item[1] is None or isinstance(item[1], str))
                and all(type(v) is int and v >= 1 for v in item[2:])
                and item[2] <= MAX_ENTRIES):
            return [], f"{GATE_FIELD}: expected [group, tenant or null, entries 1-{MAX_ENTRIES}, window ms]"
        gates.append(Gate(item[0], item[1], item[2], item[3]))
    if len({g.group for g in gates}) != 1 or len({g.key for g in gates}) != len(gates):
        return [], f"{GATE_FIELD}: expected the gates of one group, each once"
    return gates, None


# -- the reply of a gate write (recruiter.store.start_gates) ----------------------------------


@dataclass(frozen=True)
class Reply:
    """What one gate write said: granted at ``at`` (the server's time), or not, and why."""

    at: datetime
    granted: bool
    problem: str | None  # the log was malformed, and was repaired full as of ``at``
    free_at: datetime  # refused: when the window frees (``at`` when granted)


def reply_of(doc: object, gates: Sequence[Gate], nonce: str) -> Reply | None:
    """The reply in the gate document ``doc`` as the write left it; None if it is not this write's
    (another write came between, or the document is not what the write makes)."""
    last = doc.get("last") if isinstance(doc, Mapping) else None
    if not isinstance(last, Mapping) or last.get("by") != nonce or not isinstance(at := last.get("at"), datetime):
        return None
    granted, problem = last.get("granted") is True, last.get("problem")
    if granted:
        return Reply(at, True, None, at)
    assert isinstance(doc, Mapping)
    frees = [free_at(_log(doc, g), g, at) for g in gates]
    return Reply(at, False, problem if isinstance(problem, str) else None, max(frees, default=at))


def _log(doc: Mapping[str, object], gate: Gate) -> list[datetime]:
    node: object = doc
    for part in gate.path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return [t for t in node if isinstance(t, datetime)] if isinstance(node, list) else []


def free_at(times: Sequence[datetime], gate: Gate, now: datetime) -> datetime:
    """When a gate whose log holds ``times`` grants a start again, as of ``now``: once fewer than
    ``entries`` of its times lie in the half-open window ending then (``now`` if that is already so)."""
    within = sorted(t for t in times if t > now - gate.window)
    if len(within) < gate.entries:
        return now
    return within[len(within) - gate.entries] + gate.window
