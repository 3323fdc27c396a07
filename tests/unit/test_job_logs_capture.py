"""Capturing what a job logs (recruiter.processes.worker.capture): the bound and its marker,
each attempt keeping only its own lines (threads, tasks), and ``ctx.progress``'s checks."""

from __future__ import annotations

import asyncio
import logging
import pickle
import re
import sys
import threading

import pytest
import structlog

from recruiter.domain.attempt import MAX_LOG_BYTES
from recruiter.domain.workable import MAX_PROGRESS_MESSAGE_CHARS, JobContext, checked_progress
from recruiter.processes.worker.capture import LogBuffer, _LastResort, capturing, ensure_installed, format_line


def utf8(text: str) -> int:
    return len(text.encode())


# -- the bound ---------------------------------------------------------------------------------


def test_the_newest_lines_are_kept_within_the_bound_and_the_cut_is_counted() -> None:
    buffer = LogBuffer(max_bytes=1000)
    lines = [f"line {i:04d} " + "\u00e9" * (i % 7) + "\n" for i in range(500)]
    for line in lines:
        buffer.add(line)
    text, cut = buffer.text()
    assert utf8(text) <= 1000
    assert text.endswith(lines[-1])
    kept = text.splitlines(keepends=True)
    assert kept == lines[-len(kept):], "whole lines, the newest, in order"
    assert utf8(text) + utf8(lines[-len(kept) - 1]) > 1000, "no more dropped than needed"
    assert cut == sum(utf8(line) for line in lines[:-len(kept)])


def test_a_line_longer_than_the_bound_keeps_its_tail_on_a_character_boundary() -> None:
    buffer = LogBuffer(max_bytes=1001)
    line = "\U0001f600" * 1000 + "end\n"  # 4003 bytes
    buffer.add("first\n")
    buffer.add(line)
    text, cut = buffer.text()
    assert text.endswith("end\n")
    assert set(text[:-4]) == {"\U0001f600"}
    assert utf8(text) == 1000  # 4 + 249 whole emoji: the 1001st byte was part of one
    assert cut == utf8("first\n") + utf8(line) - utf8(text)


def test_the_default_bound_is_64_kib() -> None:
    buffer = LogBuffer()
    for i in range(3000):
        buffer.add(format_line(0.0, "info", "job", f"{i:05d} " + "x" * 40))
    text, cut = buffer.text()
    assert MAX_LOG_BYTES == 64 * 1024
    assert MAX_LOG_BYTES - 60 < utf8(text) <= MAX_LOG_BYTES
    assert cut == 3000 * utf8(format_line(0.0, "info", "job", "00000 " + "x" * 40)) - utf8(text)


def test_printed_text_becomes_lines_with_time_and_stream() -> None:
    buffer = LogBuffer()
    buffer.write("stdout", "hello ")
    buffer.write("stderr", "oops\n")
    buffer.write("stdout", "world\nand more")
    text, _ = buffer.text()
    lines = text.splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == [
        "PRINT   stderr: oops", "PRINT   stdout: hello world", "PRINT   stdout: and more"]
    assert lines[0][:4].isdigit()
    assert lines[0][23] == "Z"


def test_lines_from_a_child_count_what_it_dropped() -> None:
    buffer = LogBuffer(max_bytes=100)
    buffer.extend(["a\n", "b\n"], cut=500)
    assert buffer.text() == ("a\nb\n", 500)
    assert buffer.drain() == (["a\n", "b\n"], 500)
    assert buffer.text() == ("", 0)


# -- what is captured, and whose it is ------------------------------------------------------------


def log_everything(tag: str, n: int) -> None:
    std = logging.getLogger(f"tests.capture.{tag}")
    slog = structlog.get_logger()
    for i in range(n):
        std.info("std %s %d", tag, i)
        slog.info("slog", tag=tag, i=i)
        print(f"print {tag} {i}")
    std.debug("not kept: below INFO")


def assert_own_lines(text: str, tag: str, other: str, n: int) -> None:
    for i in range(n):
        assert f"std {tag} {i}\n" in text
        assert f"slog tag='{tag}' i={i}\n" in text
        assert f"stdout: print {tag} {i}\n" in text
    assert other not in text
    assert "not kept" not in text
    assert len(text.splitlines()) == 3 * n, "each line once (structlog's print is not kept twice)"


def test_concurrent_threads_each_keep_their_own_lines() -> None:
    ensure_installed()
    buffers = {"alpha": LogBuffer(), "beta": LogBuffer()}
    start = threading.Barrier(2)

    def attempt(tag: str) -> None:
        with capturing(buffers[tag]):
            start.wait()
            log_everything(tag, 200)

    threads = [threading.Thread(target=attempt, args=(tag,)) for tag in buffers]
    for t in threads:
        t.start()
    logging.getLogger("tests.capture.worker").warning("the worker's own line")
    for t in threads:
        t.join()
    assert_own_lines(buffers["alpha"].text()[0], "alpha", "beta", 200)
    assert_own_lines(buffers["beta"].text()[0], "beta", "alpha", 200)
    for buffer in buffers.values():
        assert "the worker's own line" not in buffer.text()[0]


def test_concurrent_tasks_and_their_threads_each_keep_their_own_lines() -> None:
    ensure_installed()
    buffers = {"one": LogBuffer(), "two": LogBuffer()}

    async def attempt(tag: str) -> None:
        with capturing(buffers[tag]):
            for i in range(50):
                logging.getLogger("tests.capture").info("std %s %d", tag, i)
                structlog.get_logger().info("slog", tag=tag, i=i)
                print(f"print {tag} {i}")
                await asyncio.sleep(0)  # the other task runs in between
            await asyncio.to_thread(log_everything, f"{tag}-thread", 20)

    async def main() -> None:
        await asyncio.gather(attempt("one"), attempt("two"))
        structlog.get_logger().warning("the worker's own event")

    asyncio.run(main())
    for tag, other in (("one", "two"), ("two", "one")):
        text = buffers[tag].text()[0]
        assert all(f"std {tag} {i}\n" in text and f"stdout: print {tag} {i}\n" in text for i in range(50))
        assert f"std {tag}-thread 19\n" in text
        assert f" {other} " not in text
        assert f"'{other}" not in text
        assert f"{other}-thread" not in text
        assert len(text.splitlines()) == 3 * 50 + 3 * 20
        assert "own event" not in text


def test_lines_carry_time_level_and_logger_name_and_exceptions() -> None:
    ensure_installed()
    buffer = LogBuffer()
    with capturing(buffer):
        try:
            raise KeyError("k")
        except KeyError:
            logging.getLogger("app.copy").exception("copy failed")
            structlog.get_logger().exception("slog failed", file="a")
        print("partial", end="")
    text, _ = buffer.text()
    assert " ERROR   app.copy: copy failed\nTraceback" in text
    assert "ERROR   slog failed file='a'\nTraceback" in text
    assert text.count("KeyError: 'k'") == 2
    assert text.endswith("PRINT   stdout: partial\n")


def test_nothing_is_captured_outside_an_attempt() -> None:
    ensure_installed()
    buffer = LogBuffer()
    with capturing(buffer):
        pass
    logging.getLogger("x").warning("after")
    print("after")
    assert buffer.text() == ("", 0)
    assert isinstance(sys.stdout.write("x"), int)  # the stream still works as one


# -- ctx.progress --------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "message", "problem"), [
    ("0.5", None, "must be a number from 0 to 1, got str"),
    (True, None, "got bool"),
    (float("nan"), None, "from 0 to 1, got nan"),
    (1.5, None, "from 0 to 1, got 1.5"),
    (-0.1, None, "got -0.1"),
    (float("inf"), "x", "got inf"),
    (0.5, 42, "message must be a string, got int"),
    (None, None, "needs a value (0 to 1) or a message"),
])
def test_bad_progress_is_one_line_value_error(value: object, message: object, problem: str) -> None:
    ctx = JobContext("j", 1, "w", "g", reporter=lambda v, m: pytest.fail("nothing may be reported"))
    with pytest.raises(ValueError, match=re.escape(problem)) as raised:
        ctx.progress(value, message)  # type: ignore[arg-type]
    assert "\n" not in str(raised.value)


def test_progress_is_reported_checked_and_cut() -> None:
    said: list[tuple[float | None, str | None]] = []
    ctx = JobContext("j", 1, "w", "g", reporter=lambda v, m: said.append((v, m)))
    ctx.progress(0.4, "copied 4 of 10 files")
    ctx.progress(1)
    ctx.progress(message="x" * 2000)
    assert said == [(0.4, "copied 4 of 10 files"), (1.0, None), (None, "x" * MAX_PROGRESS_MESSAGE_CHARS)]
    assert checked_progress(0) == (0.0, None)
    JobContext("j", 1, "w", "g").progress(0.5)  # no reporter: checked, kept nowhere


def test_a_context_pickles_without_its_reporter() -> None:
    ctx = JobContext("j", 1, "w", "g", tags=("t",), reporter=lambda v, m: None)
    copy = pickle.loads(pickle.dumps(ctx))
    assert copy == ctx
    assert copy.reporter is None


def test_a_warning_printed_by_a_logging_handler_is_kept_once() -> None:
    ensure_installed()
    handler = logging.StreamHandler(sys.stderr)  # the current (wrapped) stderr, as a process's handler may be
    logging.getLogger().addHandler(handler)
    buffer = LogBuffer()
    try:
        with capturing(buffer):
            logging.getLogger("tests.once").warning("said once")
            _LastResort(logging.WARNING).handle(logging.makeLogRecord({"msg": "via last resort", "levelno": 30}))
    finally:
        logging.getLogger().removeHandler(handler)
    lines = buffer.text()[0].splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == ["WARNING tests.once: said once"]
