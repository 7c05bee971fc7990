"""``SampleBatcher``: samples scored one call at a time, sent to Chalk as one batch.

verl's reward loop hands its reward function one response per call and awaits
every response of a step at once on one event loop (each a task of its own,
arriving as its tokens are decoded). Scored call by call, that is a batch of
one per response: on a cluster, a client, a submit and a wait for each. The
batcher collects the calls that arrive on one loop while others are still
arriving (each arrival extends the gathering by ``window_s``, up to
``max_wait_s`` after the first) and scores them together, so a step's
responses reach the queue as a few batches and each call still gets its own
result.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from chalk_client.integrations.samples import Sample
from chalk_client.jobs import JobResult

ScoreBatch = Callable[[list[Sample]], Awaitable[list[JobResult]]]
"""Scores samples together, returning their results in order (``SampleScorer.score_async``)."""

DEFAULT_WINDOW_S = 0.002
"""How long a gathering stays open after its last arrival."""
DEFAULT_MAX_WAIT_S = 0.05
"""The longest a call waits for others before its batch is sent."""
DEFAULT_MAX_SAMPLES = 4096
"""A gathering this large is sent at once."""


@dataclass
class _Gathering:
    """The calls waiting on one loop for their batch to be sent."""

    samples: list[Sample] = field(default_factory=list)
    futures: list[asyncio.Future[JobResult]] = field(default_factory=list)


class SampleBatcher:
    """Gathers concurrent calls on each event loop into batches for ``score_batch``.

    ``score`` is a coroutine per sample; calls made on one loop within
    ``window_s`` of each other (and at most ``max_wait_s`` after the first) are
    scored in one ``score_batch`` call of at most ``max_samples``. A call
    cancelled while it waits is left out of nothing: its sample is scored with
    the others and its result dropped. An exception from ``score_batch`` is
    raised in every call of that batch.
    """

    def __init__(
        self,
        score_batch: ScoreBatch,
        *,
        window_s: float = DEFAULT_WINDOW_S,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        max_samples: int = DEFAULT_MAX_SAMPLES,
    ) -> None:
        if window_s < 0 or max_wait_s < window_s:
            raise ValueError(
                f"need 0 <= window_s <= max_wait_s, got window_s={window_s}, "
                f"max_wait_s={max_wait_s}"
            )
        if max_samples < 1:
            raise ValueError(f"max_samples must be at least 1, not {max_samples}")
        self.score_batch = score_batch
        self.window_s = window_s
        self.max_wait_s = max_wait_s
        self.max_samples = max_samples
        self.batch_sizes: list[int] = []
        """The size of every batch sent, in order (for tests and benchmarks)."""
        self._open: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Gathering] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()  # loops of several threads may share one batcher
        self._senders: set[asyncio.Task[None]] = set()  # held until done: the loop holds weakly

    async def score(self, sample: Sample) -> JobResult:
        """``sample``'s result, scored in a batch with the calls around it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[JobResult] = loop.create_future()
        with self._lock:
            gathering = self._open.get(loop)
            if gathering is None:
                gathering = self._open[loop] = _Gathering()
                sender = loop.create_task(self._send_when_gathered(loop, gathering))
                self._senders.add(sender)
                sender.add_done_callback(self._senders.discard)
            gathering.samples.append(sample)
            gathering.futures.append(future)
            if len(gathering.samples) >= self.max_samples:
                self._close(loop, gathering)  # sent at the end of its current window
        return await future

    def _close(self, loop: asyncio.AbstractEventLoop, gathering: _Gathering) -> None:
        """No more calls join ``gathering`` (the lock is held)."""
        if self._open.get(loop) is gathering:
            del self._open[loop]

    async def _send_when_gathered(
        self, loop: asyncio.AbstractEventLoop, gathering: _Gathering
    ) -> None:
        deadline = loop.time() + self.max_wait_s
        seen = -1
        while seen < len(gathering.samples) < self.max_samples:
            seen = len(gathering.samples)
            wait = min(self.window_s, deadline - loop.time())
            if wait <= 0:
                break
            await asyncio.sleep(wait)
        with self._lock:
            self._close(loop, gathering)
        samples = [dataclasses.replace(s, index=i) for i, s in enumerate(gathering.samples)]
        self.batch_sizes.append(len(samples))
        try:
            results = await self.score_batch(samples)
        except asyncio.CancelledError:
            for future in gathering.futures:
                future.cancel()
            raise
        except Exception as exc:
            for future in gathering.futures:
                if not future.done():
                    future.set_exception(exc)
            return
        for future, result in zip(gathering.futures, results, strict=True):
            if not future.done():
                future.set_result(result)
