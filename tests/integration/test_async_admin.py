"""``AsyncRecruiter.admin``: the read model awaited from asyncio code, on the same database as the
recruiter, equal to what the synchronous ``Admin`` reads; closed with the recruiter."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from recruiter import AsyncRecruiter
from recruiter.admin import Admin
from recruiter.store import ConnectionProblem, strict
from tests.workables import Record


def test_async_admin_reads_and_acts_on_the_recruiters_database(db_uri: str, db: Any) -> None:
    async def scenario() -> tuple[Any, ...]:
        async with await AsyncRecruiter.connect(db_uri, event_listeners=strict.listeners()) as rec:
            handles = [await rec.enqueue(Record(db_uri, n=n).as_job_of(rec).in_group("mail")) for n in range(3)]
            status = await rec.admin.status()
            shown = await rec.admin.job(handles[0])
            page = await rec.admin.jobs(states=["queued"], group="mail")
            cancelled = await rec.admin.cancel([handles[1]], reason="not needed")
            deleted = await rec.admin.delete([str(handles[2])])
            switched = await rec.admin.pause("group", ["mail"])
            # The event loop is not blocked while the admin reads: both run at once.
            both = await asyncio.gather(rec.admin.paused(), rec.admin.workers())
            sync_client = rec.admin.sync.db.client
        return handles, status, shown, page, cancelled, deleted, switched, both, sync_client

    handles, status, shown, page, cancelled, deleted, switched, both, sync_client = asyncio.run(scenario())
    assert status.scheduled == {"queued": 3}
    assert shown is not None
    assert shown.id == handles[0]
    assert shown.group == "mail"
    assert {view.id for view in page.views} == set(handles)
    assert [(r.job_id, r.state) for r in cancelled] == [(handles[1], "cancelled")]
    assert [(r.job_id, r.changed) for r in deleted] == [(handles[2], True)]
    assert switched.paused.groups == ("mail",)
    assert both[0] == Admin(db).paused()
    assert both[1] == []
    assert db.archived.count_documents({"_id": {"$in": handles[1:]}}) == 2
    with pytest.raises(Exception, match="after close"):  # closed with the recruiter
        sync_client.admin.command("ping")


def test_an_async_recruiter_made_from_a_client_needs_its_uri(db_uri: str, db: Any) -> None:
    async def scenario() -> tuple[str, Any]:
        client: AsyncMongoClient[Any] = AsyncMongoClient(db_uri, tz_aware=True, event_listeners=strict.listeners())
        try:
            with pytest.raises(ConnectionProblem) as refused:
                _ = AsyncRecruiter(client, db.name).admin
            rec = AsyncRecruiter(client, db.name, uri=db_uri)
            await rec.enqueue(Record(db_uri, n=1))
            status = await rec.admin.status()
            await rec.close()
            return str(refused.value), status
        finally:
            await client.close()

    message, status = asyncio.run(scenario())
    assert "\n" not in message
    assert "uri=" in message
    assert status.scheduled == {"queued": 1}
