"""Retrying an archived job makes at most one copy, however the retries come (recruiter.store.retries):
concurrent ones, a bulk retry run twice, a retry by id after a bulk one; a retry's failure is retried, not its
original again; and the history says which job retried which."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from bson import ObjectId

from recruiter.admin import Admin
from recruiter.domain.job import JobOptions, build_job_document
from recruiter.domain.listing import EARLIEST
from recruiter.domain.requeue import retry_copy
from recruiter.store import ensure_indexes_sync, retry_once
from tests.workables import Record

FAILED = "tried-too-many-times"


@pytest.fixture
def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
def admin(db: Any) -> Admin:
    ensure_indexes_sync(db)
    return Admin(db)


def archive_failed(db: Any, db_uri: str, n: int, now: datetime) -> ObjectId:
    doc = dict(build_job_document(Record(db_uri, n=n), JobOptions(group="mail"), now - timedelta(hours=1)))
    doc.pop("status")
    db.archived.insert_one({**doc, "why": FAILED, "archived_at": now - timedelta(minutes=n), "attempts": 3})
    return doc["_id"]


def fail_again(db: Any, copy_id: object, now: datetime) -> None:
    """The copy ran and failed for good: moved to ``archived`` as the recruiter moves it."""
    doc = db.scheduled.find_one_and_delete({"_id": copy_id})
    doc.pop("status")
    db.archived.insert_one({**doc, "why": FAILED, "archived_at": now, "attempts": 3})


def test_concurrent_retries_of_one_job_make_one_copy(db: Any, db_uri: str, admin: Admin, now: datetime) -> None:
    for n in range(8):  # several rounds: each a race
        original = archive_failed(db, db_uri, n, now)
        start = threading.Barrier(4)
        results: list[Any] = []

        def retry(job: ObjectId = original, start: threading.Barrier = start, results: list[Any] = results) -> None:
            start.wait()
            results.append(admin.retry([job]))

        threads = [threading.Thread(target=retry) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        copies = list(db.scheduled.find({"retry_of": original}))
        assert len(copies) == 1, copies
        assert db.archived.find_one({"_id": original})["retried_as"] == copies[0]["_id"]
        assert sorted(len(r.jobs) for r in results) == [0, 0, 0, 1]
        assert {j.id for r in results for j in (*r.jobs, *r.already)} == {copies[0]["_id"]}


def test_copies_read_before_either_retry_wrote_make_one(db: Any, db_uri: str, now: datetime) -> None:
    """Two retries that both read the original as not retried (the dashboard's double submit): the
    server's check, not the read, decides."""
    original = archive_failed(db, db_uri, 1, now)
    doc = db.archived.find_one({"_id": original})
    first, second = retry_copy(doc, now), retry_copy(doc, now)
    assert [(w.copy, w.already) for w in retry_once(db, [first], now)] == [(first["_id"], False)]
    assert [(w.copy, w.already) for w in retry_once(db, [second], now)] == [(first["_id"], True)]
    assert db.scheduled.count_documents({"retry_of": original}) == 1
    # The same original twice in one batch: one copy.
    other = archive_failed(db, db_uri, 2, now)
    doc = db.archived.find_one({"_id": other})
    written = retry_once(db, [retry_copy(doc, now), retry_copy(doc, now)], now)
    assert [w.already for w in written] == [False, True]
    assert written[0].copy == written[1].copy
    assert db.scheduled.count_documents({"retry_of": other}) == 1


def test_a_bulk_retry_run_twice_makes_no_second_copy(db: Any, db_uri: str, admin: Admin, now: datetime) -> None:
    originals = [archive_failed(db, db_uri, n, now) for n in range(3)]
    first = admin.retry_archived(FAILED, since=EARLIEST, group="mail")
    assert {j.retry_of for j in first.jobs} == set(originals)
    again = admin.retry_archived(FAILED, since=EARLIEST, group="mail")
    assert (again.jobs, again.already) == ((), ())
    by_id = admin.retry(originals)  # the ids of a page read before the bulk retry
    assert by_id.jobs == ()
    assert {(j.retry_of, j.id) for j in by_id.already} == {(j.retry_of, j.id) for j in first.jobs}
    assert by_id.describe().startswith("retried 0, 3 already retried")
    assert db.scheduled.count_documents({}) == 3


def test_a_retry_that_fails_again_is_retried_not_its_original(db: Any, db_uri: str, admin: Admin,
                                                               now: datetime) -> None:
    original = archive_failed(db, db_uri, 1, now)
    (copy,) = admin.retry([original]).jobs
    fail_again(db, copy.id, now)
    bulk = admin.retry_archived(FAILED, since=EARLIEST)
    assert [(j.retry_of, j.id is not None) for j in bulk.jobs] == [(copy.id, True)]
    newest = bulk.jobs[0].id
    assert admin.retry([original]).describe() == f"already retried as {copy.id}"
    assert admin.retry([copy.id]).describe() == f"already retried as {newest}"
    # The history reads both ways.
    first, second = admin.job(original), admin.job(copy.id)
    assert first is not None
    assert second is not None
    assert (first.retried_as, second.retry_of, second.retried_as) == (copy.id, original, newest)
    assert db.scheduled.count_documents({}) == 1


def test_a_retry_says_what_it_did(db: Any, db_uri: str, admin: Admin, now: datetime) -> None:
    original = archive_failed(db, db_uri, 1, now)
    made = admin.retry([str(original)])
    assert made.describe() == f"retried as {made.jobs[0].id}"
    assert admin.retry([original]).describe() == f"already retried as {made.jobs[0].id}"
    assert admin.retry([original]).already[0].describe(already=True) == (
        f"{original}: already retried as {made.jobs[0].id}")
