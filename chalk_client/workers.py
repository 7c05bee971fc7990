"""Live workers, as a client sees them: who takes the queue, waiting for them, warning without.

A worker is *live* while its presence record (``chalk:worker:NODE``, a
``WorkerPresence``) exists: it writes the record once it is ready to take jobs,
refreshes it every half lease and removes it when it stops; a dead worker's
record expires after two leases.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType

from chalk_client.cluster.connection import redacted
from chalk_client.cluster.presence import WorkerPresence
from chalk_client.errors import ChalkError

POLL_S = 0.5
"""How often ``wait_for_workers`` looks again."""
CHECK_S = 2.0
"""How often ``chalk score`` looks for a live worker while it waits for results."""
REMIND_S = 30.0
"""How often it says again that no worker is live."""


def on_queue(workers: Sequence[WorkerPresence], queue: str) -> list[WorkerPresence]:
    """The workers that take jobs from ``queue``."""
    return [worker for worker in workers if worker.queue == queue]


def no_worker_message(url: str, queue: str) -> str:
    """What to tell a user whose jobs wait for a worker that does not exist."""
    return (
        f"no live worker takes jobs from queue {queue!r} at {redacted(url)}: the jobs wait in "
        "the queue until one starts. Start one on a machine with the task packages, with "
        f"the same CHALK_REDIS_URL: `chalk worker` (or `docker compose up -d --scale "
        "worker=N`); `chalk health` lists the live workers"
    )


class WorkerWatch:
    """While it is entered, says (through ``say``) when no live worker takes the queue.

    ``live`` asks the cluster at ``url`` for the live workers of ``queue`` (a
    client's ``workers``). It looks at once when entered, then every
    ``CHECK_S`` seconds in a thread; it says so at once, again every
    ``REMIND_S`` seconds while none is live, and once more when a worker shows
    up. ``waiting`` tells how many jobs still wait. Errors reaching Redis are
    left to the waiting itself to report.
    """

    def __init__(
        self,
        live: Callable[[], Sequence[WorkerPresence]],
        url: str,
        queue: str,
        say: Callable[[str], object],
        waiting: Callable[[], int],
    ):
        self.live = live
        self.url = url
        self.queue = queue
        self.say = say
        self.waiting = waiting
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chalk-worker-watch", daemon=True)
        self._missing_since: float | None = None
        self._said_at = 0.0

    def check(self) -> None:
        """Look once, and say what changed."""
        try:
            live = self.live()
        except ChalkError:
            return
        now = time.monotonic()
        if live:
            if self._missing_since is not None:
                names = ", ".join(worker.node for worker in live)
                self.say(f"chalk score: a worker is live now ({names}); scoring goes on")
            self._missing_since = None
            return
        if self._missing_since is None:
            self._missing_since = self._said_at = now
            self.say(f"chalk score: {no_worker_message(self.url, self.queue)}")
        elif now - self._said_at >= REMIND_S:
            self._said_at = now
            self.say(
                f"chalk score: still no live worker after {now - self._missing_since:.0f} s; "
                f"{self.waiting()} job(s) waiting. Start one with `chalk worker`"
            )

    def _run(self) -> None:
        while not self._stopped.wait(CHECK_S):
            self.check()

    def __enter__(self) -> WorkerWatch:
        self.check()
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stopped.set()
        self._thread.join()
