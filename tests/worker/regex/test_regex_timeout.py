"""Regex judges search in helper processes, within ``regex_timeout_s``; the worker lives on."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from support import say

from chalk_client import ChalkSettings, JobStatus, ScoringJob
from chalk_client.judges import RegexJudge
from chalk_client.scoring import ZeroCause
from chalk_worker import score_job
from chalk_worker.regex.pool import RegexPool, close_regex_pool, regex_pool
from chalk_worker.run.runner import score_job_async

ROOT = Path(__file__).resolve().parents[3]
REDOS = r"(a+)+$"
HOSTILE = "a" * 40 + "b"  # (a+)+$ would take longer than the universe has left
ONE_SECOND = ChalkSettings(regex_timeout_s=1)


def gone(pid: int) -> bool:
    """Whether a process has ended (a zombie waiting for a parent that is not us counts)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(pids: list[int], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not all(gone(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def helper_children() -> list[int]:
    """This process's helpers, found by their command line (not by asking the pool)."""
    found = []
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.NoSuchProcess):
            helper = any(part.endswith("regex/search.py") for part in child.cmdline())
            if helper and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child.pid)
    return found


def test_a_catastrophic_pattern_ends_at_the_limit_with_an_error_verdict():
    assert score_job(ScoringJob(transcript=say("warm"), judge=RegexJudge(["warm"]))).scoring
    before = set(regex_pool().pids())
    started = time.monotonic()
    result = score_job(
        ScoringJob(transcript=say(HOSTILE), judge=RegexJudge(["a", REDOS, "never reached"])),
        settings=ONE_SECOND,
    )
    elapsed = time.monotonic() - started
    assert result.status is JobStatus.SUCCEEDED
    assert result.scoring is not None
    assert result.scoring.score == 0.0 and result.scoring.continue_task is False
    error = result.scoring.metadata["error"]
    assert f"the pattern {REDOS!r} did not finish within 1 s" in error
    assert "regex_timeout_s" in error and "CHALK_REGEX_TIMEOUT_S" in error
    assert list(result.scoring.metadata) == ["error"]
    assert result.cause is ZeroCause.TIMEOUT
    assert 1.0 <= elapsed < 5.0
    killed = before - set(regex_pool().pids())
    assert len(killed) == 1 and all(gone(pid) for pid in killed)


def test_the_next_job_in_the_same_process_scores_normally():
    score_job(ScoringJob(transcript=say(HOSTILE), judge=RegexJudge([REDOS])), settings=ONE_SECOND)
    started = time.monotonic()
    passed = score_job(ScoringJob(transcript=say("The answer: 42"), judge=RegexJudge(["42$"])))
    failed = score_job(
        ScoringJob(transcript=say("answer: 41"), judge=RegexJudge([r"answer: 4\d", r"\b42\b", "x"]))
    )
    assert time.monotonic() - started < 2.0
    assert passed.scoring is not None and passed.scoring.score == 1.0
    assert passed.scoring.continue_task and passed.scoring.metadata == {}
    assert failed.scoring is not None and failed.scoring.score == 0.0
    assert failed.scoring.metadata == {"unmatched_patterns": "\\b42\\b\nx"}


@pytest.mark.parametrize(
    ("pattern", "text"),
    [
        (re.compile("HELLO", re.IGNORECASE), "hello"),
        ("HELLO", "hello"),
        ({"pattern": "HELLO", "flags": ["IGNORECASE"]}, "hello"),
        ("(?i)straße", "STRASSE"),
        (re.compile("STRASSE", re.IGNORECASE), "straße"),
        (re.compile("^two$", re.MULTILINE), "one\ntwo\nthree"),
        ("^two$", "one\ntwo\nthree"),
        (re.compile("one.two", re.DOTALL), "one\ntwo"),
        ("one.two", "one\ntwo"),
        (re.compile(r"an swer  # spaces and comments are ignored", re.VERBOSE), "answer"),
        (re.compile(r"^\w+$", re.ASCII), "café"),
        (r"^\w+$", "café"),
        ({"pattern": r"^\w+$", "flags": ["ASCII", "MULTILINE"]}, "café\nok"),
        (re.compile(r"\bKELVIN\b", re.IGNORECASE), "\u212a" + "elvin"),
        (re.compile(r"\bK", re.IGNORECASE | re.ASCII), "\u212a"),
        (r"(\w)\1", "see"),
        (r"\d{3}-\d{4}", "call 555-0199 now"),
        (r"^$", ""),
    ],
)
def test_flags_and_syntax_give_the_verdict_of_re_search_in_the_worker(pattern, text):
    judge = RegexJudge([pattern])
    expected = judge.patterns[0].search(text) is not None
    result = score_job(ScoringJob(transcript=say(text), judge=judge))
    assert result.scoring is not None
    assert result.scoring.score == float(expected)


def test_64_concurrent_regex_jobs_on_one_loop_all_score_right():
    jobs = [
        ScoringJob(
            id=f"job-{n}",
            transcript=say(f"answer: {n}"),
            judge=RegexJudge([r"answer: \d+", rf"\b{n}$" if n % 3 else r"\bnever\b"]),
        )
        for n in range(64)
    ]

    async def score_all():
        return await asyncio.gather(*(score_job_async(job) for job in jobs))

    results = asyncio.run(score_all())
    for n, result in enumerate(results):
        assert result.status is JobStatus.SUCCEEDED, result.error
        assert result.scoring is not None
        assert result.scoring.score == (1.0 if n % 3 else 0.0), n
    assert 1 <= len(regex_pool().pids()) <= regex_pool().size


def test_a_hung_search_does_not_hold_up_searches_on_other_helpers():
    pool = RegexPool(size=2)

    async def scenario():
        hung = asyncio.ensure_future(pool.search([(REDOS, 0)], HOSTILE, 1.5))
        await asyncio.sleep(0.3)  # the hung search has its helper
        started = time.monotonic()
        quick = await asyncio.gather(*(pool.search([("x", 0)], "x" * n, 1.5) for n in range(20)))
        quick_s, still_hung = time.monotonic() - started, not hung.done()
        return await hung, quick, quick_s, still_hung

    try:
        hung, quick, quick_s, still_hung = asyncio.run(scenario())
    finally:
        pool.close()
    assert hung.timed_out and hung.timed_out_on == 0
    assert [outcome.unmatched for outcome in quick] == [[0]] + [[]] * 19
    assert still_hung and quick_s < 1.0


def test_cancelled_searches_give_their_turn_back():
    pool = RegexPool(size=1)

    async def scenario():
        running = asyncio.ensure_future(pool.search([(REDOS, 0)], HOSTILE, 30.0))
        await asyncio.sleep(0.3)
        (hung,) = pool.pids()
        waiting = asyncio.ensure_future(pool.search([("x", 0)], "x", 30.0))
        await asyncio.sleep(0.05)
        waiting.cancel()
        running.cancel()
        await asyncio.gather(running, waiting, return_exceptions=True)
        after = await asyncio.wait_for(pool.search([("y", 0)], "y", 5.0), 5.0)
        return hung, after

    try:
        hung, after = asyncio.run(scenario())
        assert after.unmatched == [] and after.error is None
        assert gone(hung) and len(pool.pids()) == 1  # the hung one killed, a fresh one idle
    finally:
        pool.close()


def test_jobs_scored_from_several_threads_share_the_helpers():
    failures: list[str] = []

    def score_some(thread: int) -> None:
        for n in range(10):
            text = f"thread {thread} job {n}"
            result = score_job(ScoringJob(transcript=say(text), judge=RegexJudge([f"job {n}$"])))
            if result.scoring is None or result.scoring.score != 1.0:
                failures.append(text)

    threads = [threading.Thread(target=score_some, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(regex_pool().pids()) <= regex_pool().size


def test_closing_the_pool_leaves_no_helper_running():
    async def busy():
        judge = RegexJudge(["x"])
        await asyncio.gather(
            *(score_job_async(ScoringJob(transcript=say("x"), judge=judge)) for _ in range(8))
        )

    asyncio.run(busy())
    pids = regex_pool().pids()
    assert pids and sorted(pids) == sorted(helper_children())
    close_regex_pool()
    assert all(gone(pid) for pid in pids)
    assert helper_children() == []
    # The next search starts a fresh pool.
    assert score_job(ScoringJob(transcript=say("x"), judge=RegexJudge(["x"]))).scoring.score == 1
    close_regex_pool()
    assert helper_children() == []


def test_a_helper_killed_mid_search_is_replaced_and_the_search_tried_again():
    pool = RegexPool(size=1)

    async def scenario():
        await pool.search([("warm", 0)], "warm", 5.0)
        (first,) = pool.pids()
        asyncio.get_running_loop().call_later(0.2, os.kill, first, signal.SIGKILL)
        # About a second of backtracking: long enough to be killed once, short enough to end.
        outcome = await pool.search([(REDOS, 0)], "a" * 23 + "b", 30.0)
        return first, outcome

    try:
        first, outcome = asyncio.run(scenario())
        assert outcome.error is None and not outcome.timed_out
        assert outcome.unmatched == [0]
        assert gone(first) and first not in pool.pids()
    finally:
        pool.close()


def test_a_helper_that_dies_twice_fails_the_job_with_a_clear_error():
    done = threading.Event()

    def keep_killing() -> None:
        while not done.wait(0.05):
            for pid in regex_pool().pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    killer = threading.Thread(target=keep_killing)
    killer.start()
    try:
        result = score_job(
            ScoringJob(transcript=say(HOSTILE), judge=RegexJudge([REDOS])),
            settings=ChalkSettings(regex_timeout_s=30),
        )
    finally:
        done.set()
        killer.join()
    assert result.status is JobStatus.FAILED
    assert "died twice" in (result.error or "")
    assert "SIGKILL" in (result.error or "")
    assert score_job(ScoringJob(transcript=say("ok"), judge=RegexJudge(["ok"]))).scoring.score == 1


WORKER_THAT_DIES = """
import asyncio
from chalk_worker.regex.pool import RegexPool

pool = RegexPool(size=2)

async def main():
    hung = asyncio.ensure_future(pool.search([("(a+)+$", 0)], "a" * 40 + "b", 600.0))
    await asyncio.sleep(0.5)
    await pool.search([("x", 0)], "x", 10.0)
    print(*pool.pids(), flush=True)
    await hung

asyncio.run(main())
"""


def test_helpers_exit_by_themselves_when_their_worker_is_killed():
    with subprocess.Popen(
        [sys.executable, "-c", WORKER_THAT_DIES], cwd=ROOT, stdout=subprocess.PIPE, text=True
    ) as worker:
        try:
            assert worker.stdout is not None
            pids = [int(pid) for pid in worker.stdout.readline().split()]
            assert len(pids) == 2  # one searching for ever, one idle
            assert not any(gone(pid) for pid in pids)
        finally:
            worker.kill()
            worker.wait()
    assert wait_gone(pids), [psutil.Process(pid).status() for pid in pids if not gone(pid)]


def test_the_limit_is_ten_seconds_unless_chalk_regex_timeout_s_says_otherwise(monkeypatch):
    assert ChalkSettings().regex_timeout_s == 10.0
    monkeypatch.setenv("CHALK_REGEX_TIMEOUT_S", "2.5")
    assert ChalkSettings().regex_timeout_s == 2.5
    assert ChalkSettings(regex_timeout_s=4).regex_timeout_s == 4.0  # explicit arguments win
    with pytest.raises(ValueError, match="greater than 0"):
        ChalkSettings(regex_timeout_s=0)


def test_a_search_stopped_before_its_first_pattern_names_no_pattern_of_an_earlier_search():
    pool = RegexPool(size=1)

    async def scenario():
        first = await pool.search([("a", 0), ("b", 0), ("c", 0), ("d", 0), ("e", 0)], "abc", 5)
        # So short a limit on so long a text that the helper is still reading the request.
        second = await pool.search([("x", 0)], "y" * (64 << 20), 0.001)
        return first, second

    try:
        first, second = asyncio.run(scenario())
    finally:
        pool.close()
    assert first.unmatched == [3, 4]
    assert second.timed_out and second.timed_out_on in (None, 0)  # never 4, from the first


def test_the_time_limit_holds_while_the_default_executor_is_busy():
    # Custom judges, unpacking and deletes share the loop's default executor; a runaway
    # search is still stopped at its limit.
    pool = RegexPool(size=1)

    async def scenario():
        loop = asyncio.get_running_loop()
        workers = getattr(loop, "_default_executor", None)
        size = workers._max_workers if workers else min(32, (os.cpu_count() or 1) + 4)
        busy = [loop.run_in_executor(None, time.sleep, 6) for _ in range(size + 2)]
        await asyncio.sleep(0.2)
        started = time.monotonic()
        outcome = await pool.search([(REDOS, 0)], HOSTILE, 1)
        took = time.monotonic() - started
        await asyncio.gather(*busy)
        return outcome, took

    try:
        outcome, took = asyncio.run(scenario())
    finally:
        pool.close()
    assert outcome.timed_out and took < 5, took
