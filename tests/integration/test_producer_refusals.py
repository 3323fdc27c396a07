"""The producer's boundary, sync and asyncio alike: everything is checked before the first write.

Every refused input is a ``JobRefused`` with a one-line reason, and the
``scheduled`` collection is left exactly as it was. ``enqueue_many`` is all or
nothing and names the bad item.
"""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient, MongoClient

from bench.commands import Commands
from recruiter import AsyncRecruiter, JobRefused, Recruiter, Workable
from recruiter.domain.retry import Archive, Decision, Failure, RetryForever, RetryPolicy
from recruiter.store import strict
from tests.conftest import REPO
from tests.workables import Record

MiB = 1024 * 1024


class InfiniteTimeout(Record):
    timeout_s = math.inf


class DottedGroup(Record):
    group = "a.b"


class PolicyNotAPolicy(Record):
    retry_policy = "retry please"


class NoSuchMethod(Record):
    method = "perform"


Ghost = type("Phantom", (Record,), {})  # not importable as <module>:Phantom


def _local_workable() -> Workable:
    class Local(Workable):
        def execute(self) -> None:
            pass

    return Local()


def _local_policy() -> RetryPolicy:
    @dataclass(frozen=True)
    class LocalPolicy(RetryPolicy):
        def decide(self, failure: Failure, now: datetime) -> Decision:
            return Archive("x")

    return LocalPolicy()


class MainDefined(Record):
    pass


MainDefined.__module__ = "__main__"  # as if defined in the script being run

@dataclass(frozen=True)
class KeyedPolicy(RetryPolicy):
    limits: dict[str, int]

    def decide(self, failure: Failure, now: datetime) -> Decision:
        return Archive("x")


def _nested(levels: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"s": 1}
    for _ in range(1, levels):
        doc = {"s": doc}
    return doc


Make = Callable[[Any, str], Any]  # (producer, ledger uri) -> what is passed to enqueue

# Refused when the job is built: the fluent call itself raises.
AT_CALL: dict[str, Make] = {
    "timeout inf": lambda rec, u: Record(u).as_job_of(rec).with_timeout(math.inf),
    "timeout nan": lambda rec, u: Record(u).as_job_of(rec).with_timeout(math.nan),
    "timeout 0": lambda rec, u: Record(u).as_job_of(rec).with_timeout(0),
    "timeout negative": lambda rec, u: Record(u).as_job_of(rec).with_timeout(-5),
    "timeout bool": lambda rec, u: Record(u).as_job_of(rec).with_timeout(True),
    "timeout text": lambda rec, u: Record(u).as_job_of(rec).with_timeout("10"),
    "timeout beyond 24 days": lambda rec, u: Record(u).as_job_of(rec).with_timeout(10**9),
    "timeout timedelta 0": lambda rec, u: Record(u).as_job_of(rec).with_timeout(timedelta()),
    "retry_with None": lambda rec, u: Record(u).as_job_of(rec).retry_with(None),
    "retry_with a class": lambda rec, u: Record(u).as_job_of(rec).retry_with(RetryForever),
    "retry_with text": lambda rec, u: Record(u).as_job_of(rec).retry_with("exponential"),
    "group a.b": lambda rec, u: Record(u).as_job_of(rec).in_group("a.b"),
    "group $g": lambda rec, u: Record(u).as_job_of(rec).in_group("$g"),
    "group *": lambda rec, u: Record(u).as_job_of(rec).in_group("*"),
    "group empty": lambda rec, u: Record(u).as_job_of(rec).in_group(""),
    "group None": lambda rec, u: Record(u).as_job_of(rec).in_group(None),
    "group with comma": lambda rec, u: Record(u).as_job_of(rec).in_group("a,b"),
    "group padded": lambda rec, u: Record(u).as_job_of(rec).in_group(" billing"),
    "group NUL": lambda rec, u: Record(u).as_job_of(rec).in_group("bill\x00ing"),
    "group too long": lambda rec, u: Record(u).as_job_of(rec).in_group("g" * 201),
    "tenant a.b": lambda rec, u: Record(u).as_job_of(rec).for_tenant("acme.com"),
    "tenant $t": lambda rec, u: Record(u).as_job_of(rec).for_tenant("$t"),
    "tenant None": lambda rec, u: Record(u).as_job_of(rec).for_tenant(None),
    "priority": lambda rec, u: Record(u).as_job_of(rec).with_priority("urgent"),
    "schedule_at text": lambda rec, u: Record(u).as_job_of(rec).schedule_at("tomorrow"),
    "schedule_in overflow": lambda rec, u: Record(u).as_job_of(rec).schedule_in(days=10**10),
    "schedule_in negative": lambda rec, u: Record(u).as_job_of(rec).schedule_in(minutes=-1),
}

# Refused by enqueue: the item can be built, but not stored or not kept.
AT_ENQUEUE: dict[str, Make] = {
    "17 MiB": lambda rec, u: Record(u + "x" * (17 * MiB)),
    "just over the limit less history room": lambda rec, u: Record(u + "x" * (16 * MiB - 200 * 1024)),
    "unserialisable parameter": lambda rec, u: Record(u, n={1, 2}),
    "class timeout inf": lambda rec, u: InfiniteTimeout(u),
    "class group a.b": lambda rec, u: DottedGroup(u),
    "class policy not a policy": lambda rec, u: PolicyNotAPolicy(u),
    "no such method": lambda rec, u: NoSuchMethod(u),
    "defined in __main__": lambda rec, u: MainDefined(u),
    "defined in a function": lambda rec, u: _local_workable(),
    "not importable under its name": lambda rec, u: Ghost(u),
    "policy defined in a function": lambda rec, u: Record(u).as_job_of(rec).retry_with(_local_policy()),
    "not a workable": lambda rec, u: "send invoice 42",
    "$-prefixed parameter key": lambda rec, u: Record(u, n={"order": {"$where": "sleep(1000)"}}),
    "dotted parameter key": lambda rec, u: Record(u, n=[{"eur": 1}, {"usd.cents": 2}]),
    "parameters nested too deep": lambda rec, u: Record(u, n=_nested(96)),
    "$-prefixed policy parameter key": lambda rec, u: Record(u).as_job_of(rec).retry_with(
        KeyedPolicy({"$gt": 1})),
    "a workable class, not an instance": lambda rec, u: Record,
}

REASONS = {  # what the reason must say, for a few cases
    "timeout inf": "timeout must be a positive number of seconds, and finite, got inf",
    "retry_with None": "retry policy must be a recruiter.retry.RetryPolicy, got None",
    "group a.b": "invalid group name 'a.b': it contains '.'",
    "group $g": "invalid group name '$g': it starts with '$'",
    "tenant a.b": "invalid tenant name 'acme.com': it contains '.'",
    "17 MiB": "the server keeps documents of at most",
    "defined in __main__": "is defined in __main__, the script being run",
    "defined in a function": "is defined inside a function",
    "not importable under its name": "is not found under that name in module",
    "no such method": "has no method 'perform' to run",
    "$-prefixed parameter key": "cannot enqueue tests.workables:Record: parameters.n.order.$where: field name "
                                "starts with '$'; MongoDB cannot store it in an update",
    "dotted parameter key": "parameters.n.1.usd.cents: field name holds a '.'",
    "parameters nested too deep": "nests 99 levels deep; MongoDB keeps at most 100 and the round copies a job 2 "
                                  "levels deeper, so a job may nest 98",
    "$-prefixed policy parameter key": "retry_policy.parameters.limits.$gt: field name starts with '$'",
}


def _check_reason(case: str, exc: JobRefused) -> None:
    reason = str(exc)
    assert reason, reason
    assert "\n" not in reason, reason
    assert len(reason) < 600, reason
    assert REASONS.get(case, "") in reason


# -- sync and async runners: each returns the refusal and the count before and after --------------


def _sync(db_uri: str, db: Any, act: Callable[[Any], Any]) -> tuple[JobRefused, int, int]:
    with Recruiter.connect(db_uri) as rec:
        rec.enqueue(Record(db_uri, n=-1))
        before = db.scheduled.count_documents({})
        with pytest.raises(JobRefused) as caught:
            act(rec)
    return caught.value, before, db.scheduled.count_documents({})


def _async(db_uri: str, db: Any, act: Callable[[Any], Any]) -> tuple[JobRefused, int, int]:
    async def scenario() -> tuple[JobRefused, int]:
        rec = await AsyncRecruiter.connect(db_uri)
        async with rec:
            await rec.enqueue(Record(db_uri, n=-1))
            before = db.scheduled.count_documents({})
            with pytest.raises(JobRefused) as caught:
                await act(rec)
        return caught.value, before

    refused, before = asyncio.run(scenario())
    return refused, before, db.scheduled.count_documents({})


RUNNERS = {"sync": _sync, "async": _async}


@pytest.mark.parametrize("mode", RUNNERS)
@pytest.mark.parametrize("case", [*AT_CALL, *AT_ENQUEUE])
def test_every_refusal_is_one_line_and_writes_nothing(db_uri: str, db: Any, mode: str, case: str) -> None:
    make = {**AT_CALL, **AT_ENQUEUE}[case]
    refused, before, after = RUNNERS[mode](db_uri, db, lambda rec: rec.enqueue(make(rec, db_uri)))
    _check_reason(case, refused)
    assert (before, after) == (1, 1)


@pytest.mark.parametrize("mode", RUNNERS)
@pytest.mark.parametrize("case", AT_ENQUEUE)
def test_enqueue_many_with_one_bad_item_writes_nothing_and_names_it(db_uri: str, db: Any, mode: str,
                                                                    case: str) -> None:
    def batch(rec: Any) -> list[Any]:
        return [*(Record(db_uri, n=i) for i in range(5)), AT_ENQUEUE[case](rec, db_uri), Record(db_uri, n=6)]

    refused, before, after = RUNNERS[mode](db_uri, db, lambda rec: rec.enqueue_many(batch(rec)))
    _check_reason(case, refused)
    assert str(refused).startswith("item 5 of 7: ")
    assert str(refused).endswith("nothing was written")
    assert (before, after) == (1, 1)


def test_enqueue_many_sends_no_insert_when_an_item_is_refused(db_uri: str, db: Any) -> None:
    commands = Commands()
    client: MongoClient[Any] = MongoClient(db_uri, tz_aware=True, event_listeners=[commands, *strict.listeners()])
    try:
        rec = Recruiter(client, db.name)
        with pytest.raises(JobRefused, match=r"^item 2 of 3: .*server keeps documents"):
            rec.enqueue_many([Record(db_uri), Record(db_uri), Record("x" * (17 * MiB))])
        rec.enqueue(Record(db_uri))
        rec.enqueue_many([Record(db_uri, n=i) for i in range(3)])
    finally:
        client.close()
    assert len(commands.named("insert", "scheduled")) == 2
    assert db.scheduled.count_documents({}) == 4
    # The server's limit is asked once per producer, not once per enqueue.
    assert [name for name, _, _ in commands.events].count("hello") == 1


def test_async_producer_asks_the_limit_once_and_refuses_alike(db_uri: str, db: Any) -> None:
    commands = Commands()

    async def scenario() -> None:
        client: AsyncMongoClient[Any] = AsyncMongoClient(db_uri, tz_aware=True,
                                                         event_listeners=[commands, *strict.listeners()])
        try:
            rec = AsyncRecruiter(client, db.name)
            with pytest.raises(JobRefused, match=r"^item 1 of 2: .*server keeps documents"):
                await rec.enqueue_many([Record(db_uri), Record("x" * (17 * MiB))])
            await rec.enqueue(Record(db_uri))
        finally:
            await client.close()

    asyncio.run(scenario())
    assert len(commands.named("insert", "scheduled")) == 1
    assert [name for name, _, _ in commands.events].count("hello") == 1


def test_a_job_just_under_the_limit_is_kept(db_uri: str, db: Any) -> None:
    """The refusal is about what cannot be kept: a big job that leaves room for its history is stored."""
    with Recruiter.connect(db_uri) as rec:
        job_id = rec.enqueue(Record("x" * (14 * MiB)))
    assert db.scheduled.count_documents({"_id": job_id}) == 1


def test_a_script_enqueueing_its_own_class_is_refused_with_the_reason(db_uri: str, db: Any,
                                                                    tmp_path: Path) -> None:
    """A Workable defined in the script being run (``__main__``) is refused at enqueue, not on the worker."""
    script = tmp_path / "enqueue.py"
    script.write_text(textwrap.dedent("""
        import sys

        from recruiter import JobRefused, Recruiter, Workable


        class SendInvoice(Workable):
            def __init__(self, invoice_id: str) -> None:
                self.invoice_id = invoice_id

            def execute(self) -> None:
                print("sent", self.invoice_id)


        with Recruiter.connect(sys.argv[1]) as rec:
            try:
                rec.enqueue(SendInvoice("42"))
            except JobRefused as exc:
                print(f"refused: {exc}")
    """))
    out = subprocess.run([sys.executable, str(script), db_uri], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("refused: __main__:SendInvoice is defined in __main__, the script being run")
    assert out.stdout.count("\n") == 1
    assert db.scheduled.count_documents({}) == 0


def test_schedule_in_and_timeouts_at_their_bounds_are_accepted(db_uri: str, db: Any) -> None:
    with Recruiter.connect(db_uri) as rec:
        rec.enqueue(Record(db_uri).as_job_of(rec).with_timeout(24 * 24 * 3600).schedule_in(timedelta(days=3650)))
        rec.enqueue(Record(db_uri).as_job_of(rec).with_timeout(0.001).in_group("g-1_x$").for_tenant("é" * 200))
        in_a_minute = rec.enqueue(Record(db_uri).as_job_of(rec).with_timeout(timedelta(minutes=1)))
    assert db.scheduled.count_documents({}) == 3
    assert db.scheduled.find_one({"_id": in_a_minute})["timeout_s"] == 60.0


def _refuse_item_five(db: Any, db_uri: str, how: str) -> None:
    """Make the server (not the producer's checks) refuse the job whose ``n`` is 5."""
    if how == "duplicate key":
        db.scheduled.create_index("workable.parameters.n", unique=True, name="test_unique_n",
                                  partialFilterExpression={"workable.parameters.n": {"$type": "number"}})
        with Recruiter.connect(db_uri) as rec:
            rec.enqueue(Record(db_uri, n=5))
    else:  # a validator, kept beside the collection's own
        current = db.command("listCollections", filter={"name": "scheduled"})["cursor"]["firstBatch"][0]
        schema = current["options"]["validator"]["$jsonSchema"]
        not_five = {"bsonType": "object", "properties": {"parameters": {
            "bsonType": "object", "properties": {"n": {"not": {"enum": [5]}}}}}}
        schema = {**schema, "properties": {**schema["properties"], "workable": not_five}}
        db.command("collMod", "scheduled", validator={"$jsonSchema": schema}, validationLevel="strict")


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("how", ["duplicate key", "validator"])
def test_enqueue_many_refused_by_the_server_at_item_5_of_10_writes_nothing(db_uri: str, db: Any, mode: str,
                                                                          how: str) -> None:
    """Issue 21, item 3: an ordered insert without a transaction left items 1 to 4 written."""
    items = [Record(db_uri, n=n) for n in range(1, 11)]
    if mode == "sync":
        with Recruiter.connect(db_uri) as rec:  # connect() sets the collection's own validator
            _refuse_item_five(db, db_uri, how)
            before = sorted(d["_id"] for d in db.scheduled.find({}, {"_id": 1}))
            with pytest.raises(JobRefused) as info:
                rec.enqueue_many(items)
    else:
        async def scenario() -> list[Any]:
            async with await AsyncRecruiter.connect(db_uri) as rec:
                _refuse_item_five(db, db_uri, how)
                ids = sorted(d["_id"] for d in db.scheduled.find({}, {"_id": 1}))
                with pytest.raises(JobRefused) as caught:
                    await rec.enqueue_many(items)
                infos.append(caught)
                return ids

        infos: list[Any] = []
        before = asyncio.run(scenario())
        info = infos[0]
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("item 5 of 10: refused by the server")
    assert message.endswith("nothing was written")
    assert sorted(d["_id"] for d in db.scheduled.find({}, {"_id": 1})) == before
