"""The cleaner: work done after the job, in order, and all of it done by ``drain``."""

from __future__ import annotations

import functools
import threading
import time

from chalk_worker.sandbox import cleanup


def test_work_is_done_in_order_off_the_caller_and_drain_waits_for_it():
    done: list[tuple[int, str]] = []
    caller = threading.current_thread().name

    def slow(number: int) -> None:
        time.sleep(0.05)
        done.append((number, threading.current_thread().name))

    for number in range(3):
        cleanup.later(functools.partial(slow, number))
    assert len(done) < 3  # handed over, not done here
    cleanup.drain()
    assert [number for number, _ in done] == [0, 1, 2]
    assert all(name != caller for _, name in done)


def test_a_failing_piece_of_work_does_not_stop_the_next(caplog):
    done: list[str] = []

    def broken() -> None:
        raise OSError("cannot remove")

    cleanup.later(broken)
    cleanup.later(lambda: done.append("next"))
    cleanup.drain()
    assert done == ["next"]
    assert "cleaning up after a job failed" in caplog.text
