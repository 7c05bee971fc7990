"""Work handed over by any thread and done by a thread of its own, in rounds.

Far from Redis, what costs is the round trip, not the command: events,
acknowledgements and results are each queued here by the thread that has them,
which goes on at once, and a daemon thread does everything waiting in one round
(one pipeline), in the order queued.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class Rounds(Generic[_T]):
    """Items done by ``do_round`` on a daemon thread, up to ``max_per_round`` at a time.

    With ``max_waiting``, the oldest item beyond it is handed to ``overflow``
    instead (to drop, say, events while Redis is away).
    """

    def __init__(
        self,
        name: str,
        do_round: Callable[[list[_T]], None],
        *,
        max_per_round: int,
        max_waiting: int | None = None,
        overflow: Callable[[_T], None] | None = None,
    ) -> None:
        self.name = name
        self._do_round = do_round
        self._max_per_round = max_per_round
        self._max_waiting = max_waiting
        self._overflow = overflow
        self._waiting: deque[_T] = deque()
        self._ready = threading.Condition()
        self._doing = 0
        self._thread: threading.Thread | None = None

    def put(self, item: _T) -> None:
        """Queue ``item``; returns at once (the thread starts with the first)."""
        with self._ready:
            if self._max_waiting is not None and len(self._waiting) >= self._max_waiting:
                oldest = self._waiting.popleft()
                if self._overflow is not None:
                    self._overflow(oldest)
            self._waiting.append(item)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._ready.notify()

    def pending(self) -> int:
        """How many items are queued or in the round being done."""
        with self._ready:
            return len(self._waiting) + self._doing

    def flush(self, timeout: float) -> bool:
        """Wait until every item queued was done; ``False`` if time ran out."""
        deadline = time.monotonic() + timeout
        with self._ready:
            while self._waiting or self._doing:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._ready.wait(min(left, 0.05))
        return True

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._waiting:
                    self._ready.wait()
                count = min(len(self._waiting), self._max_per_round)
                round_ = [self._waiting.popleft() for _ in range(count)]
                self._doing = count
            try:
                self._do_round(round_)
            except Exception:  # the thread goes on whatever one round did
                log.exception("%s: a round of %d item(s) failed", self.name, len(round_))
            finally:
                with self._ready:
                    self._doing = 0
                    self._ready.notify_all()
