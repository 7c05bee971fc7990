"""A job's stop switch: once thrown, the job's sandboxed runs are killed and no new one starts.

A worker stops a job whose batch was cancelled (or that another worker finished):
its coroutine is cancelled, which abandons what it awaits (LLM calls), but a
scoring script runs in a thread of its own and would run on to its timeout.
Each run enters the switch of the job it belongs to (``CURRENT``, a context
variable the job's run sets and its threads inherit) with the function that
kills everything the run started, as a timeout would; throwing the switch kills
the runs inside it, and keeps killing for a moment, so that a run whose process
was starting at that instant cannot outlive it. The kills run under the switch's
lock, which a run takes to leave: a run that left (its slot free for the next
job) is never killed after.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextvars import ContextVar

KILL_FOR_S = 900.0
"""How long a thrown switch goes on killing a run that is still inside it, at most (a run
leaves as soon as its process is gone; one still starting may take up to a minute)."""
KILL_EVERY_S = 0.05
"""The first pause between kills; it doubles up to a second."""


class StopSwitch:
    """One job's switch; ``enter`` and ``leave`` from any thread, ``throw`` once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thrown = False
        self._runs: dict[int, Callable[[], object]] = {}
        self._count = 0

    @property
    def thrown(self) -> bool:
        """Whether the job was stopped."""
        return self._thrown

    def enter(self, kill: Callable[[], object]) -> int | None:
        """Note a run starting, and how to kill it; ``None``: the job was stopped, do not
        start it."""
        with self._lock:
            if self._thrown:
                return None
            self._count += 1
            self._runs[self._count] = kill
            return self._count

    def leave(self, ticket: int) -> None:
        """Note a run ended (``ticket`` from ``enter``)."""
        with self._lock:
            self._runs.pop(ticket, None)

    def wait_stopped(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for every run inside to have left; whether they all did."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if not self._runs:
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def throw(self) -> None:
        """Stop the job: no run starts any more, and those inside are killed, again and
        again until they have left (for ``KILL_FOR_S`` at most)."""
        with self._lock:
            self._thrown = True
        deadline = time.monotonic() + KILL_FOR_S
        pause = KILL_EVERY_S
        while True:
            with self._lock:
                if not self._runs:
                    return
                for kill in self._runs.values():
                    kill()
            if time.monotonic() >= deadline:
                return
            time.sleep(pause)
            pause = min(pause * 2, 1.0)


CURRENT: ContextVar[StopSwitch | None] = ContextVar("chalk_stop_switch", default=None)
"""The switch of the job whose run this is (set by the job's run; threads it starts inherit it)."""
