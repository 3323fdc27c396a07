"""The ``audit`` collection: one document per action taken from the dashboard.

Each entry says who (the authenticated user, or how the request was let in), what
(the action and its target), when (the server's time as the caller read it) and
from where (the client's address), and what came of it. Entries are only ever
inserted; the dashboard reads the newest ones back, by the ``newest`` index.

Invariant: only the dashboard writes here, so the processes' roles need nothing on
this collection; :func:`ensure_audit_index` is called when the dashboard starts.
Entries read back are untrusted documents: :func:`recent_actions` keeps only
values of the expected types.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pymongo import DESCENDING, IndexModel

from recruiter.store.layout import AUDIT, SyncDb

# Bounds of one entry's free text (a target may list many job ids).
MAX_FIELD = 2000
INDEXES = [
    # The newest entries first (the dashboard's audit view), and a range by time in mongosh.
    IndexModel([("at", DESCENDING)], name="newest"),
]


@dataclass(frozen=True)
class AuditEntry:
    """One action: who did what to which target, when, from where, and its outcome."""

    at: datetime
    who: str
    action: str
    target: str
    client: str
    outcome: str


def ensure_audit_index(db: SyncDb) -> None:
    db[AUDIT].create_indexes(INDEXES)


def record_action(db: SyncDb, entry: AuditEntry) -> None:
    """Insert one entry (each text cut to :data:`MAX_FIELD` characters)."""
    db[AUDIT].insert_one({
        "at": entry.at, "who": entry.who[:MAX_FIELD], "action": entry.action[:MAX_FIELD],
        "target": entry.target[:MAX_FIELD], "client": entry.client[:MAX_FIELD], "outcome": entry.outcome[:MAX_FIELD],
    })


def recent_actions(db: SyncDb, limit: int) -> list[AuditEntry]:
    """The newest ``limit`` entries, newest first (one read on ``newest``); malformed ones are skipped."""
    entries = []
    for doc in db[AUDIT].find({}, sort=[("at", DESCENDING)], limit=limit).hint("newest"):
        entry = _entry(doc)
        if entry is not None:
            entries.append(entry)
    return entries


def _entry(doc: dict[str, Any]) -> AuditEntry | None:
    at = doc.get("at")
    texts = [doc.get(k) for k in ("who", "action", "target", "client", "outcome")]
    if not isinstance(at, datetime) or not all(isinstance(t, str) for t in texts):
        return None
    who, action, target, client, outcome = (str(t) for t in texts)
    return AuditEntry(at, who, action, target, client, outcome)
