"""One asyncio event loop per worker process, in a thread of its own.

Celery has no async tasks: each task thread hands its coroutine to this loop
and blocks until it is done, so one process holds many jobs (all of them
awaiting the LLM, say) on one loop. ``score_job`` and ``score_jobs`` do the
same for callers in-process (a trainer's thread pool, say), so their jobs
share the loop, its LLM clients and their connections. The loop is made lazily
in the process that uses it, after any fork, and a forked child makes its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")
_lock = threading.Lock()
_current: tuple[int, ProcessLoop] | None = None


class ProcessLoop:
    """An event loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="chalk-event-loop", daemon=True
        )
        self.thread.start()

    def submit(self, coroutine: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        """Start ``coroutine`` on the loop; its outcome arrives in the returned future."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coroutine`` on the loop and wait for its outcome (from any other thread).

        If the wait is interrupted (Ctrl-C in the calling thread), the coroutine
        is cancelled rather than left running on the loop for nobody.
        """
        future = self.submit(coroutine)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def owns_current_thread(self) -> bool:
        """Whether the caller runs on this loop's own thread (where waiting on it deadlocks)."""
        return threading.current_thread() is self.thread


def process_loop() -> ProcessLoop:
    """This process's loop, made on first use."""
    global _current
    with _lock:
        if _current is None or _current[0] != os.getpid():
            _current = (os.getpid(), ProcessLoop())
        return _current[1]


def _forget_after_fork() -> None:
    # The parent's loop thread does not exist in the child, and a thread of the parent
    # may have held the lock at the fork: the child starts afresh.
    global _lock, _current
    _lock, _current = threading.Lock(), None


os.register_at_fork(after_in_child=_forget_after_fork)
