"""What a job hands back, made safe (recruiter.domain.handback), for each class of hostile value:
results kept exactly or dropped with a reason, exceptions described whatever they do, text
with lone surrogates kept escaped, log capture linear and exact without newlines."""

from __future__ import annotations

import asyncio
import pickle
from datetime import UTC, datetime
from typing import Any

import bson
import pytest
from bson import ObjectId

from recruiter import ResultDropped
from recruiter.domain.attempt import RemoteFailure, describe_exception, failure_of
from recruiter.domain.following import view_of
from recruiter.domain.handback import (
    DEFAULT_MAX_RESULT_BYTES,
    MAX_RESULT_DEPTH,
    Dropped,
    checked_result,
    describe,
    storable_text,
)
from recruiter.domain.outcome import Execution, Outcome, archived_document
from recruiter.domain.retry import Archive
from recruiter.domain.workable import checked_progress
from recruiter.processes.worker.capture import LogBuffer, format_line
from recruiter.processes.worker.executor import _guarded
from tests.hostile_jobs import BEHAVIOURS, EXPECTED, NothingWorks, StrNotString, StrRaises

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def nested(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


# -- results -----------------------------------------------------------------------------------


def test_a_result_of_the_default_limit_is_kept_as_a_reader_gets_it_back() -> None:
    assert DEFAULT_MAX_RESULT_BYTES == 1024 * 1024
    big = "x" * (200 * 1024)
    assert checked_result(big) == (big, None)
    value, dropped = checked_result({"t": (1, 2), "n": None, "deep": nested(MAX_RESULT_DEPTH - 2)})
    assert dropped is None
    assert value == {"t": [1, 2], "n": None, "deep": nested(MAX_RESULT_DEPTH - 2)}  # a BSON round trip


@pytest.mark.parametrize(("what", "reason"), [(w, r) for w, (k, r) in EXPECTED.items() if k == "dropped"])
def test_each_unstorable_result_is_dropped_with_its_reason(what: str, reason: str) -> None:
    value, dropped = checked_result(BEHAVIOURS[what](None))  # type: ignore[arg-type]
    assert value is None
    assert dropped is not None
    assert reason in dropped.reason
    assert len(dropped.reason) <= 500
    bson.encode(dropped.document())  # storable itself


def test_the_size_is_given_when_the_result_is_over_the_limit() -> None:
    value, dropped = checked_result("x" * 1000, max_bytes=500)
    assert value is None
    assert dropped == Dropped("the result is 1013 bytes of BSON, over the 500-byte limit", 1013)
    assert dropped.document() == {"reason": dropped.reason, "size_bytes": 1013}


def test_a_result_of_too_many_values_is_refused_without_walking_them_all() -> None:
    shared: list[object] = [1] * 10
    for _ in range(40):  # 10 * 2**40 values, each list twice: a walk of them all would never end
        shared = [shared, shared]
    value, dropped = checked_result(shared)
    assert value is None
    assert dropped is not None
    assert "more values than" in dropped.reason


def test_a_key_with_a_dollar_inside_or_a_nul_is_judged_as_mongodb_does() -> None:
    assert checked_result({"a$b": 1}) == ({"a$b": 1}, None)  # only a leading $ is refused
    value, dropped = checked_result({"ok": [{"x": {"\x00": 1}}]})
    assert value is None
    assert dropped is not None
    assert "NULL" in dropped.reason


def test_a_mapping_whose_reading_raises_anything_is_dropped_not_raised() -> None:
    class Hostile(dict[str, object]):
        def __iter__(self) -> Any:
            raise SystemExit(3)

    value, dropped = checked_result(Hostile(a=1))
    assert value is None
    assert dropped is not None
    assert "SystemExit" in dropped.reason


# -- text for people -------------------------------------------------------------------------------


def test_lone_surrogates_are_escaped_and_other_text_kept_as_it_is() -> None:
    assert storable_text("plain") == "plain"
    assert storable_text("caf\u00e9 \U0001f600") == "caf\u00e9 \U0001f600"
    assert storable_text("a\ud800b\udfff") == "a\\ud800b\\udfff"
    bson.encode({"t": storable_text("\ud800" * 3)})

    class Sneaky(str):
        def __str__(self) -> str:
            raise RuntimeError

    assert type(storable_text(Sneaky("x\ud800"))) is str


def test_a_progress_message_with_a_surrogate_is_kept_escaped() -> None:
    assert checked_progress(0.5, "half \ud800") == (0.5, "half \\ud800")


def test_an_execution_stores_surrogates_escaped() -> None:
    execution = Execution(attempt=1, kind="failed", worker="w", pid=1, hostname="h", scheduled_at=NOW,
                          started_at=NOW, ended_at=NOW, error_class="m:E\ud800", message="m\ud800",
                          trace="t\udfff", logs="l\ud800\n", logs_cut=0)
    doc = execution.to_document()
    assert (doc["class"], doc["message"], doc["trace"], doc["logs"]) == ("m:E\\ud800", "m\\ud800", "t\\udfff",
                                                                        "l\\ud800\n")
    bson.encode(doc)


# -- exceptions -----------------------------------------------------------------------------------


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:  # noqa: BLE001
        return caught


@pytest.mark.parametrize(("exc", "lineage", "message"), [
    (StrRaises(), "tests.hostile_jobs:StrRaises", "<StrRaises whose str() failed>"),
    (StrNotString(), "tests.hostile_jobs:StrNotString", "<StrNotString whose str() failed>"),
    (NothingWorks(), "builtins:Exception", "<NothingWorks whose str() failed>"),
    (ValueError("bad \ud800"), "builtins:ValueError", "bad \\ud800"),
    (SystemExit(42), "builtins:SystemExit", "42"),
    (KeyboardInterrupt(), "builtins:KeyboardInterrupt", ""),
], ids=["str-raises", "str-not-a-string", "nothing-works", "surrogate", "sys-exit", "keyboard-interrupt"])
def test_any_exception_is_described_without_raising(exc: BaseException, lineage: str, message: str) -> None:
    names, text, trace = describe(raised(exc))
    assert names[0] == lineage
    assert text == message
    assert trace.startswith("Traceback")
    bson.encode({"names": list(names), "text": text, "trace": trace})
    cls, text2, _ = describe_exception(raised(exc))
    assert (cls, text2) == (lineage, message)
    job = {"_id": ObjectId(), "attempts": 1, "created_at": NOW, "scheduled_at": NOW, "group": "g"}
    assert failure_of(job, exc, NOW).message == message


def test_a_traceback_that_cannot_be_formatted_is_said_so() -> None:
    exc = raised(ValueError("x"))
    exc.__notes__ = None  # type: ignore[attr-defined]  # not a list: format_exception fails on 3.11
    exc.__cause__ = StrRaises()
    _, _, trace = describe(exc)
    assert trace  # either formatted or a line saying it could not be


def test_a_base_exception_of_the_job_becomes_a_failure_described_in_its_own_task() -> None:
    async def job() -> None:
        raise SystemExit(42)

    async def main() -> BaseException:
        task = asyncio.ensure_future(_guarded(job()))
        try:
            await task
        except RemoteFailure as exc:
            return exc
        raise AssertionError("not raised")

    failure = asyncio.run(main())  # without the guard, asyncio raises SystemExit out of the loop
    assert isinstance(failure, RemoteFailure)
    assert failure.lineage[0] == "builtins:SystemExit"
    assert failure.message == "42"


def test_the_guard_lets_a_cancellation_through() -> None:
    async def main() -> None:
        task = asyncio.ensure_future(_guarded(asyncio.sleep(10)))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


# -- outcomes, archived, wait() ---------------------------------------------------------------------


def done_outcome(**extra: Any) -> Outcome:
    execution = Execution(attempt=1, kind="done", worker="w", pid=1, hostname="h", scheduled_at=NOW,
                          started_at=NOW, ended_at=NOW, logs="logs", logs_cut=3)
    return Outcome(ObjectId(), ObjectId(), 1, executed=True, decision=Archive("done"), execution=execution, **extra)


def test_a_dropped_result_is_archived_and_raised_by_wait() -> None:
    outcome = done_outcome(result_dropped=Dropped("the result is 2000000 bytes of BSON, over the limit", 2000000))
    job = {"_id": outcome.job_id, "attempts": 1, "workable": {"class": "m:C"}, "group": "g", "created_at": NOW}
    archived = archived_document(job, outcome.to_document(), NOW)
    assert archived["result_dropped"] == {"reason": "the result is 2000000 bytes of BSON, over the limit",
                                          "size_bytes": 2000000}
    assert "result" not in archived
    view = view_of(job["_id"], None, archived, None, NOW)
    assert view is not None
    error = ResultDropped(view)
    assert error.reason.startswith("the result is 2000000 bytes")
    assert error.size_bytes == 2000000
    assert str(error) == (f"job {job['_id']} ended done but its result was not kept (2000000 bytes): "
                          "the result is 2000000 bytes of BSON, over the limit")
    assert pickle.loads(pickle.dumps(error)).reason == error.reason


def test_an_outcome_stripped_keeps_its_decision_and_says_why() -> None:
    outcome = done_outcome(result={"a": 1})
    stripped = outcome.stripped("WriteError: too big")
    assert stripped.decision == outcome.decision
    assert stripped.result is None
    assert stripped.result_dropped == Dropped("the outcome could not be written with it: WriteError: too big")
    assert stripped.execution is not None
    assert (stripped.execution.logs, stripped.execution.trace) == ("", None)
    assert "WriteError: too big" in (stripped.execution.message or "")


# -- log capture ------------------------------------------------------------------------------------


def test_output_without_newlines_keeps_the_newest_bytes_and_counts_the_rest() -> None:
    buffer = LogBuffer(max_bytes=1000)
    for i in range(5000):
        buffer.write("stdout", f"\r{i:06d}")
    text, cut = buffer.text()
    assert text.endswith("004999\n")
    line = format_line(0.0, "print", "stdout", "")
    assert len(text.encode()) <= 1000
    assert cut + len(text.encode()) == 5000 * 7 + len(line.encode()), "every byte kept or counted"


def test_lines_of_one_big_write_are_kept_or_counted_exactly() -> None:
    lines = [f"{i:05d} " + "\u00e9" * (i % 5) for i in range(3000)]
    one, many = LogBuffer(max_bytes=2000), LogBuffer(max_bytes=2000)
    one.write("stdout", "\n".join(lines) + "\n")
    for line in lines:
        many.write("stdout", line + "\n")
    (text, cut), (text2, cut2) = one.text(), many.text()
    strip = [t.split(" ", 2)[2] for t in text.splitlines()]
    assert strip == [t.split(" ", 2)[2] for t in text2.splitlines()]
    assert cut == cut2


def test_a_captured_line_with_a_surrogate_is_kept_escaped() -> None:
    buffer = LogBuffer()
    buffer.write("stdout", "a \ud800 b\n")
    buffer.add("c \udfff\n")
    text, _ = buffer.text()
    assert "a \\ud800 b" in text
    assert "c \\udfff" in text
    bson.encode({"logs": text})
