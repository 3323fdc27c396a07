"""The roster entries the read model uses (``status``, ``workers list``, ``stats``, ``jobs explain``),
each checked once, where it is read.

Invariant: a roster entry is untrusted input (an older version's, another language's, a hand
edit in ``mongosh``). :func:`recruiter.domain.documents.entry_problem`, the check the recruiter
applies before a round uses an entry, is applied here to every entry the read model reads; a
malformed one is set aside with its reason, so what follows can hash its ``_id``, sort and join
its ``work_on`` names and read its ``assigned_to`` as a document. A front end shows the entries
set aside as malformed, and never fails on them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from recruiter.domain.documents import entry_problem
from recruiter.store import Document

SHOWN_ID_CHARS = 100  # as the recruiter's worker.malformed warning shows it


@dataclass(frozen=True)
class MalformedEntry:
    """A roster entry set aside: its ``_id`` as text (cut), and what is wrong with it."""

    id: str
    problem: str


def shown_id(value: object) -> str:
    """A stored ``_id`` as text (of any type: a malformed one may be a document or an array)."""
    return str(value)[:SHOWN_ID_CHARS]


def checked_entries(entries: Iterable[Document]) -> tuple[list[Document], list[MalformedEntry]]:
    """The well-formed entries of ``entries`` (in their order), and those set aside as malformed."""
    kept: list[Document] = []
    malformed: list[MalformedEntry] = []
    for e in entries:
        problem = entry_problem(e)
        if problem is None:
            kept.append(e)
        else:
            malformed.append(MalformedEntry(shown_id(e.get("_id")), problem))
    return kept, malformed
