"""One asyncio event loop per worker process, in a thread of its own.

Celery has no async tasks: each task thread hands its coroutine to this loop
and blocks until it is done, so one process holds many jobs (all of them
awaiting the LLM, say) on one loop. The loop is made lazily in the process
that uses it, after any fork, and a forked child makes its own.
"""

from __future__ import annotations

import asyncio
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

    def run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coroutine`` on the loop and wait for its outcome (from any other thread)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()


def process_loop() -> ProcessLoop:
    """This process's loop, made on first use."""
    global _current
    with _lock:
        if _current is None or _current[0] != os.getpid():
            _current = (os.getpid(), ProcessLoop())
        return _current[1]
