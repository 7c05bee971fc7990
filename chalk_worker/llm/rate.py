"""Pacing LLM requests: per worker process, and for the whole cluster through Redis.

Both limiters space request starts evenly, without bursts: at ``per_minute``,
one request starts every ``60 / per_minute`` seconds. The pool paces every
HTTP request, the ``openai`` client's retries included (``LLMPool``).

The cluster's limiter keeps, per LLM server, the time its next request may
start (``chalk:llm-rate:SERVER``, microseconds on Redis's clock, so workers on
machines with skewed clocks agree). A request reserves the next free start in
one atomic script and sleeps until it comes: one round trip per request, and a
hundred workers start their requests one after another. When Redis cannot be
reached, each process paces itself at the cluster's rate until it can (logged).
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from typing import Protocol

from redis.exceptions import NoScriptError

from chalk_client.cluster import keys
from chalk_client.cluster.rate import RESERVE
from chalk_worker.llm.loop_redis import REDIS_FAILURES, LoopRedis

WITHOUT_IT = "this process paces its LLM requests alone, at the cluster's rate"


class RateLimiter(Protocol):
    """Paces the start of requests; a Redis-backed one shares a limit across workers."""

    async def acquire(self) -> None:
        """Wait until one more request may start."""


class MemoryRateLimiter:
    """Spaces request starts evenly so this process starts at most ``per_minute`` a minute."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._next = 0.0
        self._lock = threading.Lock()

    async def acquire(self) -> None:
        """Wait for this request's turn (no wait when the limit is 0)."""
        if self.per_minute <= 0:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + 60.0 / self.per_minute
        if start > now:
            await asyncio.sleep(start - now)


def server_digest(base_url: str) -> str:
    """A short, key-safe name for an LLM server."""
    return hashlib.sha256(base_url.encode()).hexdigest()[:16]


class RedisRateLimiter:
    """Spaces the starts of every worker's requests to one server, through Redis."""

    def __init__(self, redis: LoopRedis, base_url: str, per_minute: int) -> None:
        self.redis = redis
        self.key = keys.llm_rate(server_digest(base_url))
        self.per_minute = per_minute
        self.fallback = MemoryRateLimiter(per_minute)

    async def acquire(self) -> None:
        """Reserve the cluster's next free start and wait for it (locally if Redis is down)."""
        if self.per_minute <= 0:
            return
        client = self.redis.client()
        if client is None:
            await self.fallback.acquire()
            return
        spacing_us = round(60_000_000 / self.per_minute)
        try:
            try:
                wait_us = await client.evalsha(RESERVE.sha, 1, self.key, spacing_us)
            except NoScriptError:
                wait_us = await client.eval(RESERVE.text, 1, self.key, spacing_us)
        except REDIS_FAILURES as exc:
            self.redis.failed("pacing an LLM request", exc, WITHOUT_IT)
            await self.fallback.acquire()
            return
        self.redis.succeeded()
        if int(wait_us) > 0:
            await asyncio.sleep(int(wait_us) / 1_000_000)
