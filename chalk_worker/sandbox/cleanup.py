"""Removing what a finished job leaves behind, off the job's path.

Unmounting a script's scratch space waits for an RCU grace period, and removing
folders waits for the file system's journal: milliseconds during which the
thread that does it could start the next script. ``later`` hands such work to
one background thread per process, which does it in order (a scratch space is
unmounted before its job's folder is removed). ``drain`` waits for all of it:
at exit, and before ``score_job`` returns (its callers expect no folder left).
A worker killed before the cleaner is done leaves folders that the next worker
to start removes (``workdirs.sweep_stale_job_dirs``).
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

_lock = threading.Lock()
_cleaner: tuple[int, Cleaner] | None = None


class Cleaner:
    """A thread doing cleanup work in the order it was handed over."""

    def __init__(self) -> None:
        self._work: queue.Queue[Callable[[], object]] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="chalk-cleanup", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            work = self._work.get()
            try:
                work()
            except Exception:  # a cleanup that fails must not stop the others
                log.exception("cleaning up after a job failed")
            finally:
                self._work.task_done()

    def later(self, work: Callable[[], object]) -> None:
        """Do ``work`` soon, after the work handed over before it."""
        self._work.put(work)

    def drain(self) -> None:
        """Wait until every piece of work handed over so far is done."""
        self._work.join()


def cleaner() -> Cleaner:
    """This process's cleaner (a new one after a fork: threads do not survive it)."""
    global _cleaner
    with _lock:
        if _cleaner is None or _cleaner[0] != os.getpid():
            _cleaner = (os.getpid(), Cleaner())
        return _cleaner[1]


def later(work: Callable[[], object]) -> None:
    """Hand ``work`` to this process's cleaner."""
    cleaner().later(work)


def drain() -> None:
    """Wait for this process's cleanup work (nothing to wait for if none was handed over)."""
    with _lock:
        current = _cleaner[1] if _cleaner is not None and _cleaner[0] == os.getpid() else None
    if current is not None:
        current.drain()


atexit.register(drain)
