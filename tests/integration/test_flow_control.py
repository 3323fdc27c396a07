"""Flow control on the real server: caps and rates obeyed by the rounds, kept across a failover,
set and listed through the read model, and never stopped by a malformed stored limit."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pymongo import MongoClient

from recruiter.admin import Admin
from recruiter.domain.limits import Limit, Rate
from recruiter.processes.recruiter import RecruiterConfig, RecruiterProcess
from recruiter.store import strict
from tests.integration.test_processes_inproc import Harness, run, take_and_work
from tests.workables import Record


def admin(h: Harness) -> Admin:
    return Admin(h.sync_db, h.clock)


async def locked_groups(h: Harness) -> list[str]:
    return sorted(d["group"] for d in await h.db.scheduled.find({"locked": True}).to_list())


async def enqueue(h: Harness, group: str, n: int, tenant: str | None = None) -> list[Any]:
    out = []
    for i in range(n):
        job = Record(h.db_uri, n=i).as_job_of(h.producer).in_group(group)
        out.append(await (job.for_tenant(tenant) if tenant else job).enqueue())
    return out


def test_a_cap_holds_its_group_back_and_the_workers_go_to_other_groups(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        admin(h).set_limit("pay", max_running=2)
        slots = [await h.worker(f"w{i}") for i in range(4)]
        await enqueue(h, "pay", 5)
        await enqueue(h, "mail", 2)
        assert (await h.round()).assigned == 4
        assert await locked_groups(h) == ["mail", "mail", "pay", "pay"]
        assert (await h.round()).assigned == 0  # two pay jobs run: the cap is reached

        # One pay job finishes: its outcome is applied and the next pay job goes out, in one round.
        worked = 0
        for process, slot in slots:
            entry = await h.roster(slot.id)
            job = await h.job(entry["assigned_to"][slot.id])
            if job["group"] == "pay" and not worked:
                await take_and_work(process, slot)
                worked += 1
        assert (await h.round()).assigned == 1
        assert await locked_groups(h) == ["mail", "mail", "pay", "pay"]
        listing = admin(h).limits()
        (view,) = listing.limits
        assert (view.group, view.running, view.held) == ("pay", 2, True)
        (shown,) = admin(h).stats().limits  # recruiter stats says which limit holds jobs back
        assert (shown.group, shown.running, shown.held) == ("pay", 2, True)

    run(db_uri, scenario)


def test_a_rate_is_paced_on_the_servers_clock_and_the_tokens_survive_a_failover(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        admin(h).set_limit("pay", rate="2/s", burst=1)
        workers = [(await h.worker(f"w{i}", "pay"))[0] for i in range(6)]
        await enqueue(h, "pay", 6)
        assert (await h.round()).assigned == 2  # a full bucket: 1 + burst
        assert (await h.round()).assigned == 0
        stored = await h.db.metadata.find_one({"_id": "fairness"})
        assert stored["limiter"]["groups"]["pay"]["t"] == 0

        h.clock.advance(timedelta(milliseconds=500))  # one token at 2/s
        assert (await h.round()).assigned == 1

        # The leader dies; its successor goes on from the stored tokens: no fresh burst.
        h.clock.advance(timedelta(seconds=RecruiterConfig().lease_ttl_s + 0.2))
        for w in workers:
            await w.heartbeat()  # the workers live on
        successor = RecruiterProcess(h.db, h.clock, RecruiterConfig(), owner="successor")
        h.recruiter = successor
        got = (await h.round()).assigned
        # 10.2 s at 2/s refill at most the bucket's capacity (2): never more than one full bucket.
        assert got == 2, got
        h.clock.advance(timedelta(milliseconds=100))
        # The next token is due 0.51 s after the burst's starts: within this round's reach (it starts then).
        assert (await h.round()).assigned == 1
        assert (await h.round()).assigned == 0

    run(db_uri, scenario)


def test_a_new_leader_counts_what_is_locked_so_the_cap_holds_whatever_the_last_round_did(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        admin(h).set_limit("pay", tenant="acme", max_running=1)
        workers = [(await h.worker(f"w{i}", "pay"))[0] for i in range(3)]
        await enqueue(h, "pay", 3, tenant="acme")
        other = await enqueue(h, "pay", 1, tenant="zeta")
        assert (await h.round()).assigned == 2
        assert len(await locked_groups(h)) == 2
        successor = RecruiterProcess(h.db, h.clock, RecruiterConfig(), owner="successor")
        h.recruiter = successor
        h.clock.advance(timedelta(seconds=RecruiterConfig().lease_ttl_s + 0.2))
        for w in workers:
            await w.heartbeat()
        assert (await h.round()).assigned == 0  # acme runs one; its cap is 1
        zeta = await h.job(other[0])
        assert zeta["locked"] is True

    run(db_uri, scenario)


def test_malformed_limits_and_state_never_stop_a_round(db_uri: str) -> None:
    async def scenario(h: Harness) -> None:
        await h.db.metadata.insert_one({"_id": "limits", "groups": {"pay": {"rate": "5/x"}, "mail": "no"},
                                        "tenants": 7})
        await h.db.metadata.insert_one({"_id": "fairness", "limiter": "garbage"})
        for i in range(3):
            await h.worker(f"w{i}")
        await enqueue(h, "pay", 2)
        await enqueue(h, "mail", 1)
        # Malformed limits fail closed: with no good limit read before, nothing of pay or mail starts.
        assert (await h.round()).assigned == 0
        listing = admin(h).limits()
        assert listing.limits == ()
        assert len(listing.problems) == 3
        assert {e.key for e in listing.malformed} == {("pay", None), ("mail", None)}
        assert admin(h).stats().malformed_limits == listing.problems  # recruiter stats says so too

        # A good limit beside a malformed state: the state is rewritten whole, never patched inside garbage.
        admin(h).set_limit("pay", rate="1/s")
        await enqueue(h, "pay", 3)
        await h.worker("w3")
        await h.worker("w4")
        assert (await h.round()).assigned == 0  # the malformed state starts the bucket empty, not full
        h.clock.advance(timedelta(seconds=1))
        assert (await h.round()).assigned == 1
        stored = await h.db.metadata.find_one({"_id": "fairness"})
        assert isinstance(stored["limiter"], dict)
        assert "pay" in stored["limiter"]["groups"]

    run(db_uri, scenario)


def test_limits_set_list_clear_and_declare_through_the_read_model(db_uri: str) -> None:
    client: MongoClient[Any] = MongoClient(db_uri, tz_aware=True, event_listeners=strict.listeners())
    try:
        a = Admin(client.get_default_database())
        done = a.set_limit("payments", tenant="new-co", rate="50/s", burst=5, max_running=8)
        assert done.unknown_tenant  # a warning, not an error: tenants appear over time
        a.set_limit("payments", max_running=3)
        a.set_limit("pay%x$y", rate="1/m")  # names that are not field names are escaped
        views = {(v.group, v.tenant): v for v in a.limits().limits}
        assert set(views) == {("payments", None), ("payments", "new-co"), ("pay%x$y", None)}
        assert views[("payments", "new-co")].limit == Limit(8, Rate.parse("50/s", 5))
        assert views[("payments", "new-co")].tokens == 6.0
        assert a.clear_limit("payments", tenant="new-co") is True
        assert a.clear_limit("payments", tenant="new-co") is False
        declared = a.declare_limits({"mail": Limit(rate=Rate.parse("5/s")), ("mail", "acme"): Limit(max_running=1)})
        assert set(declared.by_key) == {("mail", None), ("mail", "acme")}
        assert {(v.group, v.tenant) for v in a.limits().limits} == {("mail", None), ("mail", "acme")}

        before = client.get_default_database().metadata.find_one({"_id": "limits"})
        for bad in ({"rate": "5/x"}, {"rate": "0/s"}, {"rate": "-1/s"}, {"max_running": 0}, {},
                    {"burst": 3, "max_running": 2, "replace": True}):
            with pytest.raises(ValueError, match=r"rate|max_running|burst") as caught:
                a.set_limit("mail", **bad)
            assert "\n" not in str(caught.value)
        with pytest.raises(ValueError, match="invalid group name"):
            a.set_limit("*", max_running=1)
        assert client.get_default_database().metadata.find_one({"_id": "limits"}) == before

        # A hand edit broke the document's shape: setting a limit writes it whole, valid limits kept.
        metadata = client.get_default_database().metadata
        metadata.update_one({"_id": "limits"}, {"$set": {"tenants": "oops"}})
        a.set_limit("mail", tenant="acme", max_running=2)
        assert {(v.group, v.tenant): v.limit.max_running for v in a.limits().limits} == {
            ("mail", None): None, ("mail", "acme"): 2}
        metadata.update_one({"_id": "limits"}, {"$set": {"tenants.mail": 5}})
        a.set_limit("mail", tenant="zeta", max_running=1)
        assert {(v.group, v.tenant) for v in a.limits().limits} == {("mail", None), ("mail", "zeta")}

        # Setting one field keeps the others and says what it replaced; replace=True drops them, and says so.
        a.set_limit("pay", max_running=2)
        kept = a.set_limit("pay", rate="5/s")
        assert kept.view.limit == Limit(2, Rate.parse("5/s"))
        assert kept.replaced == Limit(2)
        assert kept.dropped == ()
        replaced = a.set_limit("pay", rate="4/s", replace=True)
        assert replaced.view.limit == Limit(rate=Rate.parse("4/s"))
        assert replaced.dropped == ("max_running 2",)
        metadata.update_one({"_id": "limits"}, {"$set": {"groups.pay": {"max_running": 2.5}}})
        fixed = a.set_limit("pay", max_running=3)
        assert fixed.replaced_malformed == "max_running: expected an integer, got float 2.5"
        assert fixed.view.limit == Limit(3)
    finally:
        client.close()
