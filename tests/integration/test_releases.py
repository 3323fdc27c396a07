"""Releases side by side on the real server (issue 43): what each process records, what the leader
refuses, what a worker refuses, and what ``recruiter status`` says.

A release this one does not work beside is written by hand (``0.0.9``, or ``0.4.0`` that works
beside ``0.3.0`` and later): no such release exists to run. Beside the previous release, for
real, see ``tests/processes/test_upgrades.py``.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from structlog.testing import capture_logs

from recruiter.admin.status import status
from recruiter.cli.status import figures_of, render_status
from recruiter.domain.versions import RELEASE, UNRECORDED, WORKS_BESIDE
from recruiter.processes.releases import ReleaseRefused, refuse_leaders
from tests.integration.test_processes_inproc import Harness, run
from tests.workables import Record

TOO_OLD = {"version": "0.0.9", "works_beside": "0.0.8"}
TOO_NEW = {"version": "0.5.0", "works_beside": "0.4.0"}
THIS = {"version": RELEASE, "works_beside": WORKS_BESIDE}


def test_every_process_records_its_release(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        await h.worker("w")
        await h.round()  # takes the lease
        assert (await h.roster("w"))["release"] == THIS
        assert (await h.db.heartbeats.find_one({"ids": "w"}))["release"] == THIS
        lease = await h.db.metadata.find_one({"_id": "recruiter"})
        assert lease["release"] == {**THIS, "owner": "recruiter-under-test"}

    run(db_uri, scenario)


async def refused_then_served(h: Harness, release: dict[str, str], words: str) -> None:
    job = await h.producer.enqueue(Record(h.db_uri, n=1))
    await h.worker("other")
    await h.db.roster.update_one({"_id": "other"}, {"$set": {"release": release}})
    with capture_logs() as logs:
        assert (await h.round()).assigned == 0
        assert (await h.round()).assigned == 0
    refused = [e for e in logs if e["event"] == "worker.release_refused"]
    assert len(refused) == 1, logs  # one line per entry, not one per round
    assert refused[0]["worker_id"] == "other"
    assert release["version"] in refused[0]["reason"]
    assert RELEASE in refused[0]["reason"]
    assert words in refused[0]["reason"]
    assert (await h.roster("other")).get("assigned_to") is None
    await h.worker("this")  # this release
    assert (await h.round()).assigned == 1
    assert (await h.roster("this"))["assigned_to"] == {"this": job}


def test_the_leader_gives_no_work_to_a_worker_older_than_it_works_beside(db_uri: str) -> None:
    run(db_uri, lambda h: refused_then_served(h, TOO_OLD, f"upgrade the worker to {WORKS_BESIDE} or later"))


def test_the_leader_gives_no_work_to_a_worker_that_does_not_work_beside_it(db_uri: str) -> None:
    run(db_uri, lambda h: refused_then_served(h, TOO_NEW, "upgrade this process to 0.4.0 or later"))


def test_a_worker_that_records_no_release_or_an_unreadable_one_is_served(db_uri: str) -> None:
    """Recording none (0.1.1 or older, or an entry written by hand) or a release that cannot be read:
    not known, so not held against it (status warns that releases are mixed)."""

    async def scenario(h: Harness) -> None:
        await h.producer.enqueue(Record(h.db_uri, n=1))
        await h.producer.enqueue(Record(h.db_uri, n=2))
        await h.worker("previous")
        await h.db.roster.update_one({"_id": "previous"}, {"$unset": {"release": ""}})
        await h.worker("damaged")
        await h.db.roster.update_one({"_id": "damaged"}, {"$set": {"release": {"version": ["x"]}}})
        assert (await h.round()).assigned == 2

    run(db_uri, scenario)


def lease(name: str, release: dict[str, str] | None, *, owner: str = "host:1:x", held: bool = True) -> dict[str, Any]:
    now = datetime.now(UTC)
    doc: dict[str, Any] = {"_id": name, "owner": owner, "epoch": 3,
                           "expires_at": now + (timedelta(hours=1) if held else -timedelta(minutes=1))}
    if release is not None:
        doc["release"] = {**release, "owner": owner}
    return doc


def refusal(db_uri: str) -> str | None:
    async def check() -> str | None:
        client: AsyncMongoClient[Any] = AsyncMongoClient(db_uri, tz_aware=True)
        try:
            await refuse_leaders(client.get_default_database())
        except ReleaseRefused as exc:
            return str(exc)
        finally:
            await client.close()
        return None

    return asyncio.run(check())


def test_a_worker_refuses_to_start_under_a_leader_it_does_not_work_beside(db_uri: str, db: Any) -> None:
    db.metadata.insert_one(lease("recruiter", TOO_OLD))
    line = refusal(db_uri)
    assert line is not None
    assert "\n" not in line
    assert line.startswith("worker refused to start: the leading recruiter runs recruiter 0.0.9, older than "
                           f"{WORKS_BESIDE}, the oldest this release ({RELEASE}) works beside")
    db.metadata.replace_one({"_id": "recruiter"}, lease("recruiter", TOO_NEW))
    assert "upgrade this process to 0.4.0 or later" in (refusal(db_uri) or "")


@pytest.mark.parametrize("doc", [
    lease("recruiter", None),  # 0.1.1 or older records none: not known, not held against it
    {**lease("recruiter", None), "release": {**THIS, "owner": "the holder before"}},  # left by a holder before
    lease("recruiter", THIS),
    lease("recruiter", TOO_OLD, held=False),  # expired: no one leads
    {**lease("recruiter", None), "release": "0.0.9"},  # unreadable: damage, not held against it
])
def test_a_worker_starts_under_a_leader_it_works_beside(db_uri: str, db: Any, doc: dict[str, Any]) -> None:
    db.metadata.insert_one(doc)
    db.metadata.insert_one(lease("cleaner", THIS))
    assert refusal(db_uri) is None


def test_status_lists_the_releases_live_and_warns(db: Any) -> None:
    now = datetime.now(UTC)
    db.metadata.insert_many([lease("recruiter", None), lease("cleaner", TOO_OLD, owner="c:2:y")])
    shown = render_status(figures_of(status(db, now)), as_json=False)
    releases = [line for line in shown.splitlines() if line.startswith("releases:")]
    assert releases == [f"releases:  0.0.9 (cleaner lease); {UNRECORDED} or older (none recorded) (recruiter lease)"]
    warnings = [line for line in shown.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2, shown
    assert warnings[0].startswith("warning:   releases are mixed: 0.0.9, ")
    assert warnings[1].startswith("warning:   the cleaner lease holder runs recruiter 0.0.9, older than ")


def test_status_without_a_warning_when_one_release_runs(db: Any) -> None:
    db.metadata.insert_many([lease("recruiter", THIS), lease("cleaner", THIS, held=False)])
    shown = render_status(figures_of(status(db, datetime.now(UTC))), as_json=False)
    assert f"releases:  {RELEASE} (recruiter lease)" in shown
    assert "warning" not in shown
