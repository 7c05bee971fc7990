"""Async Redis clients for what the workers share while grading: verdicts, the request pace.

A ``redis.asyncio`` connection belongs to one event loop: a worker process has
one loop (``process_loop``), ``score_job`` one per call. So each loop gets its
own client, made on first use and closed with that loop's LLM clients
(``chalk_worker.llm.client.close_llm_clients``).

What these clients serve is either an optimisation (a remembered verdict) or
has a local stand-in (pacing in this process alone), so Redis trouble must cost
grading little: no retries, short timeouts, at most ``MAX_CONNECTIONS`` per
loop. The first failure is logged and Redis is left alone for
``OUTAGE_PAUSE_S`` before it is tried again; its return is logged too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
import weakref

import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from chalk_client.cluster.connection import blocking_pool, redacted

log = logging.getLogger(__name__)

TIMEOUT_S = 2.0
"""Longest wait for a connection, a connect or a reply."""
OUTAGE_PAUSE_S = 5.0
"""After a failure, how long Redis is not asked again."""
MAX_CONNECTIONS = 16
"""Connections one event loop may open to Redis."""

REDIS_FAILURES = (redis.RedisError, OSError)
"""What an unreachable, slow or unwilling Redis raises (``TimeoutError`` is an ``OSError``)."""


class LoopRedis:
    """The clients of one Redis URL, one per event loop, and the state of that Redis."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, redis.asyncio.Redis]
        self._clients = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._paused_until = 0.0
        self._down = False

    def client(self) -> redis.asyncio.Redis | None:
        """The running loop's client; ``None`` while Redis is left alone after a failure."""
        if self._paused_until and time.monotonic() < self._paused_until:
            return None
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._clients.get(loop)
            if client is None:
                pool = blocking_pool(
                    self.url,
                    max_connections=MAX_CONNECTIONS,
                    timeout=TIMEOUT_S,
                    socket_timeout=TIMEOUT_S,
                    socket_connect_timeout=TIMEOUT_S,
                    retry=Retry(NoBackoff(), 0),
                )
                client = redis.asyncio.Redis.from_pool(pool)
                self._clients[loop] = client
        return client

    def failed(self, doing: str, error: BaseException, meanwhile: str) -> None:
        """Note a failure while ``doing``; the first of an outage is logged with ``meanwhile``."""
        with self._lock:
            first = not self._down
            self._down = True
            self._paused_until = time.monotonic() + OUTAGE_PAUSE_S
        if first:
            log.warning(
                "cannot reach Redis at %s while %s (%s: %s); %s, and trying Redis again "
                "every %.0f s",
                redacted(self.url),
                doing,
                type(error).__name__,
                error,
                meanwhile,
                OUTAGE_PAUSE_S,
            )

    def succeeded(self) -> None:
        """Note a command that worked: an outage, if any, is over."""
        if not self._down:
            return
        with self._lock:
            was_down, self._down = self._down, False
            self._paused_until = 0.0
        if was_down:
            log.warning("Redis at %s is reachable again", redacted(self.url))

    async def close(self) -> None:
        """Close the running loop's client, if it has one."""
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._clients.pop(loop, None)
        if client is not None:
            with contextlib.suppress(*REDIS_FAILURES):  # a Redis that is gone
                await client.aclose()


_registry: dict[str, LoopRedis] = {}
_registry_lock = threading.Lock()


def _forget_after_fork() -> None:
    # The parent's connections and locks are not the child's.
    global _registry_lock
    _registry.clear()
    _registry_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def loop_redis(url: str) -> LoopRedis:
    """This process's clients of ``url``, made on first use."""
    with _registry_lock:
        found = _registry.get(url)
        if found is None:
            found = _registry[url] = LoopRedis(url)
        return found


async def close_loop_redis() -> None:
    """Close the running loop's clients of every URL; call it before the loop ends."""
    with _registry_lock:
        every = list(_registry.values())
    for one in every:
        await one.close()
