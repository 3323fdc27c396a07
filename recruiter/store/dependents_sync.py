"""Resolving the dependents of a job archived outside the leader's rounds, with the synchronous
client: a cancel or an operator's delete (:mod:`recruiter.store.cancel`,
:mod:`recruiter.store.waiting_actions`), right after its own transaction commits.

The same conditional writes as :func:`recruiter.store.dependencies.release_dependents`: each
is conditional on the dependent still held, so whoever resolves it first (this, a round, the
leader's sweep) does it once; a crash between the archive and this leaves it to the sweep.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime

from bson import ObjectId
from pymongo import ReturnDocument

from recruiter.domain.dependencies import Archive, Release, decide, failures, parse_after, pending_of
from recruiter.domain.edges import is_counted
from recruiter.domain.outcome import MALFORMED
from recruiter.store.dependencies import HELD, MAX_RESOLVED, archived_copy, release_filter, release_update
from recruiter.store.edges import any_left_sync, count_down_sync, drop_edges_sync, manifest_sync
from recruiter.store.layout import Document, SyncCollections


def release_dependents_sync(c: SyncCollections, ended: Mapping[object, object], now: datetime) -> list[Document]:
    """Jobs ``ended`` (id -> why) were archived: resolve their dependents (cascading); returns
    the dependents archived (id, why)."""
    archived_now: list[Document] = []
    todo = {k: v for k, v in ended.items() if isinstance(k, ObjectId)}
    while todo and len(archived_now) < MAX_RESOLVED:
        nxt: dict[object, object] = {}
        for dep in c.scheduled.find({"after.pending": {"$in": list(todo)}, **HELD}, {"after.pending": 1}
                                    ).limit(MAX_RESOLVED):
            pending = pending_of(dep.get("after"))
            if isinstance(pending, str):  # set aside: a $pullAll on it would fail, and every release with it
                if (done := _archive(c, dep, MALFORMED, pending, now)) is not None:
                    archived_now.append(done)
                    nxt[done["_id"]] = done["why"]
                continue
            pulled = [i for i in pending if isinstance(i, ObjectId) and i in todo]
            after = c.scheduled.find_one_and_update(
                {"_id": dep["_id"], **HELD},
                {"$pullAll": {"after.pending": pulled},
                 "$addToSet": {"after.failed": {"$each": failures({i: todo[i] for i in pulled})}}},
                return_document=ReturnDocument.AFTER)
            if after is not None and (done := _resolve(c, after, now)) is not None:
                archived_now.append(done)
                nxt[done["_id"]] = done["why"]
        for dep_id in count_down_sync(c, todo):  # dependents stored with edges (recruiter.domain.edges)
            whole = c.scheduled.find_one({"_id": dep_id, **HELD})
            if whole is not None and (done := _resolve(c, whole, now)) is not None:
                archived_now.append(done)
                nxt[done["_id"]] = done["why"]
        todo = {k: v for k, v in nxt.items() if isinstance(k, ObjectId)}
    return archived_now


def _resolve(c: SyncCollections, job: Document, now: datetime) -> Document | None:
    after = parse_after(job.get("after"), job["_id"])
    if isinstance(after, str):
        return _archive(c, job, MALFORMED, after, now)
    ids: list[ObjectId] | None = None
    if after.counted is not None:  # decided once no edge of it is left (recruiter.domain.edges)
        if any_left_sync(c, job["_id"]):
            return None
        after = replace(after, counted=replace(after.counted, left=0))
        if isinstance(listed := manifest_sync(c, job["_id"]), str):
            return _archive(c, job, MALFORMED, listed, now)
        ids = listed
    decision = decide(after)
    if isinstance(decision, Release):
        if c.scheduled.update_one(release_filter(job), release_update(decision, now, ids)).modified_count \
                and ids is not None:
            drop_edges_sync(c, job["_id"])
    elif isinstance(decision, Archive):
        return _archive(c, job, decision.why, decision.reason, now)
    return None


def _archive(c: SyncCollections, job: Document, why: str, reason: str, now: datetime) -> Document | None:
    whole = c.scheduled.find_one({"_id": job["_id"], **HELD, "locked": False})
    if whole is None:
        return None
    doc = archived_copy(whole, why, reason, now)
    counted = is_counted(whole.get("after"))
    if counted:  # its ids from its list (recruiter.domain.edges), for its history
        doc["after"]["ids"] = listed if isinstance(listed := manifest_sync(c, whole["_id"]), list) else []
    c.archived.update_one({"_id": whole["_id"]}, {"$setOnInsert": doc}, upsert=True)
    if c.scheduled.delete_one({"_id": whole["_id"], **HELD, "locked": False}).deleted_count != 1:
        return None
    if counted:
        drop_edges_sync(c, whole["_id"])
    return {"_id": whole["_id"], "why": why}
