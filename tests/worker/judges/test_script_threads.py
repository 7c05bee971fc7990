"""The threads that run scoring scripts: outcomes, errors, cancelled jobs, threads that fail."""

from __future__ import annotations

import asyncio
import functools
import threading

import pytest

from chalk_worker.judges.executable import ScriptThreads


def test_outcomes_and_errors_come_back_to_the_caller():
    threads = ScriptThreads(2)

    async def main() -> tuple[list[int], str]:
        squares = [threads.run(functools.partial(pow, n, 2)) for n in range(6)]
        results = await asyncio.gather(*squares)
        with pytest.raises(ValueError) as raised:
            await threads.run(lambda: int("x"))
        return results, str(raised.value)

    results, error = asyncio.run(main())
    assert results == [0, 1, 4, 9, 16, 25]
    assert "invalid literal" in error


def test_calls_of_cancelled_callers_that_wait_for_a_thread_do_not_run():
    threads = ScriptThreads(1)
    release, ran = threading.Event(), list[object]()

    def first() -> None:
        release.wait(10)
        ran.append("first")

    async def main() -> None:
        running = asyncio.ensure_future(threads.run(first))
        await asyncio.sleep(0.05)  # the only thread is busy with the first call
        calls = [threads.run(functools.partial(ran.append, n)) for n in range(3)]
        waiting = [asyncio.ensure_future(call) for call in calls]
        await asyncio.sleep(0.05)
        for task in waiting:
            task.cancel()
        release.set()
        await running
        assert await threads.run(lambda: "after") == "after"  # the thread still serves

    asyncio.run(main())
    assert ran == ["first"]


def test_a_thread_that_cannot_start_fails_the_call_and_the_next_call_gets_one(monkeypatch):
    threads = ScriptThreads(1)
    real_start = threading.Thread.start
    refusals = iter([True])

    def start(self: threading.Thread) -> None:
        if next(refusals, False):
            raise RuntimeError("can't start new thread")
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)

    async def main() -> str:
        with pytest.raises(RuntimeError):
            await threads.run(lambda: "never")
        return await asyncio.wait_for(threads.run(lambda: "ran"), 10)

    assert asyncio.run(main()) == "ran"


def test_an_outcome_for_a_closed_loop_is_dropped_and_the_thread_serves_on():
    threads = ScriptThreads(1)
    release = threading.Event()

    async def abandoned() -> None:
        left = asyncio.ensure_future(threads.run(lambda: release.wait(10)))
        await asyncio.sleep(0.05)
        assert not left.done()

    asyncio.run(abandoned())  # its loop closes while the call runs
    release.set()

    async def later() -> str:
        return await asyncio.wait_for(threads.run(lambda: "served"), 10)

    assert asyncio.run(later()) == "served"
