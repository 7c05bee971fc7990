"""Run a client test against both clients: ``ChalkClient``, and ``AsyncChalkClient`` seen as sync.

``SyncView`` wraps the asyncio client (and the handles and batches it returns)
so that each verb is awaited on an event loop of its own thread: the same test
code then drives both clients, verb for verb.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any

from chalk_client import AsyncBatch, AsyncChalkClient, AsyncJobHandle


class LoopThread:
    """An event loop running in a daemon thread; ``run`` awaits a coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


WRAPPED = (AsyncChalkClient, AsyncBatch, AsyncJobHandle)


class SyncView:
    """The sync verbs of an asyncio client, handle or batch (see the module's doc)."""

    def __init__(self, target: Any, loop: LoopThread) -> None:
        self._target = target
        self._loop = loop

    def _wrap(self, value: Any) -> Any:
        if isinstance(value, WRAPPED):
            return SyncView(value, self._loop)
        if inspect.isasyncgen(value):
            return self._iterate(value)
        return value

    def _iterate(self, agen: AsyncIterator[Any]) -> Iterator[Any]:
        while True:
            try:
                yield self._wrap(self._loop.run(agen.__anext__()))  # type: ignore[arg-type]
            except StopAsyncIteration:
                return

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value) or isinstance(value, type):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            made = value(*args, **kwargs)
            if inspect.iscoroutine(made):
                made = self._loop.run(made)
            return self._wrap(made)

        return call

    def __iter__(self) -> Iterator[Any]:
        return self._iterate(self._target.__aiter__())

    def __len__(self) -> int:
        return len(self._target)

    def __repr__(self) -> str:
        return repr(self._target)

    def __enter__(self) -> SyncView:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()
