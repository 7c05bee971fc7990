"""Remembered verdicts, so grading the same work against the same criterion costs no call.

A verdict is keyed by a hash of everything that decided it: the server, the
model, the prompt version, the criterion and the rendered context. Only real
YES/NO verdicts are kept, never an unscored criterion.

Two layers, each optional: the process's own memory (``CHALK_RUBRIC_CACHE_ENTRIES``
most recent verdicts), then, with a cluster (``CHALK_REDIS_URL``), Redis, shared
by every worker (``chalk:verdict:KEY``, kept ``CHALK_RUBRIC_CACHE_TTL_S`` after
its last use). A verdict found in Redis is remembered in memory too. Redis
trouble never fails grading: the verdict is asked of the LLM instead, and the
outage is logged (``chalk_worker.llm.loop_redis``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

import orjson

from chalk_client.cluster import keys
from chalk_client.settings import ChalkSettings
from chalk_worker.llm.loop_redis import REDIS_FAILURES, LoopRedis, loop_redis

log = logging.getLogger(__name__)
WITHOUT_IT = "grading goes on without the shared verdict cache"


@dataclass(frozen=True)
class CachedVerdict:
    """What is remembered of a verdict: met or not, and why."""

    met: bool
    reason: str


def verdict_key(
    *, server: str, model: str, prompt_version: str, criterion: str, context: str
) -> str:
    """The cache key of one verdict: a SHA-256 over everything that decided it."""
    parts = _json_strings([prompt_version, server, model, criterion, context])
    return hashlib.sha256(parts.encode()).hexdigest()


def _json_strings(parts: list[str]) -> str:
    """``json.dumps(parts, ensure_ascii=False)``, the same text, written by orjson (a
    transcript is encoded once per criterion: the standard library took 3% of a call's
    CPU). orjson escapes each character of a string as the standard library does; a
    string it refuses (a lone surrogate) goes to the standard library."""
    try:
        return "[" + ", ".join(orjson.dumps(part).decode() for part in parts) + "]"
    except TypeError:
        return json.dumps(parts, ensure_ascii=False)


class VerdictCache(Protocol):
    """Where verdicts are remembered; safe to call from any event loop."""

    async def get(self, key: str) -> CachedVerdict | None:
        """The verdict stored under ``key``, if any."""

    async def put(self, key: str, verdict: CachedVerdict) -> None:
        """Remember ``verdict`` under ``key``."""


class MemoryVerdictCache:
    """The most recent ``max_entries`` verdicts of this process."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, CachedVerdict] = OrderedDict()
        self._lock = threading.Lock()

    async def get(self, key: str) -> CachedVerdict | None:
        """The verdict stored under ``key``, if any (it becomes the most recent)."""
        with self._lock:
            verdict = self._entries.get(key)
            if verdict is not None:
                self._entries.move_to_end(key)
            return verdict

    async def put(self, key: str, verdict: CachedVerdict) -> None:
        """Remember ``verdict``, forgetting the least recent beyond ``max_entries``."""
        with self._lock:
            self._entries[key] = verdict
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        """Forget every verdict."""
        with self._lock:
            self._entries.clear()


def _parse(raw: bytes | str) -> CachedVerdict | None:
    try:
        data = json.loads(raw)
        met, reason = data["met"], data["reason"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(met, bool) or not isinstance(reason, str):
        return None
    return CachedVerdict(met=met, reason=reason)


class RedisVerdictCache:
    """Verdicts in the cluster's Redis, shared by every worker, each kept ``ttl_s`` after use."""

    def __init__(self, redis: LoopRedis, ttl_s: int) -> None:
        self.redis = redis
        self.ttl_s = ttl_s

    async def get(self, key: str) -> CachedVerdict | None:
        """The verdict stored under ``key`` (its time to live starts again); ``None`` on trouble."""
        client = self.redis.client()
        if client is None:
            return None
        try:
            raw = await client.getex(keys.verdict(key), ex=self.ttl_s)
        except REDIS_FAILURES as exc:
            self.redis.failed("reading a remembered verdict", exc, WITHOUT_IT)
            return None
        self.redis.succeeded()
        if raw is None:
            return None
        verdict = _parse(raw)
        if verdict is None:
            log.warning("ignoring a malformed verdict in Redis under %s", keys.verdict(key))
        return verdict

    async def put(self, key: str, verdict: CachedVerdict) -> None:
        """Remember ``verdict`` for every worker; a failure is logged, never raised."""
        client = self.redis.client()
        if client is None:
            return
        value = json.dumps({"met": verdict.met, "reason": verdict.reason}, ensure_ascii=False)
        try:
            await client.set(keys.verdict(key), value, ex=self.ttl_s)
        except REDIS_FAILURES as exc:
            self.redis.failed("storing a verdict", exc, WITHOUT_IT)
            return
        self.redis.succeeded()


class LayeredVerdictCache:
    """A fast cache in front of a shared one: look in ``near``, then in ``far``."""

    def __init__(self, near: VerdictCache, far: VerdictCache) -> None:
        self.near = near
        self.far = far

    async def get(self, key: str) -> CachedVerdict | None:
        """The verdict from ``near``, else from ``far`` (then kept in ``near`` too)."""
        verdict = await self.near.get(key)
        if verdict is None:
            verdict = await self.far.get(key)
            if verdict is not None:
                await self.near.put(key, verdict)
        return verdict

    async def put(self, key: str, verdict: CachedVerdict) -> None:
        """Remember ``verdict`` in both."""
        await self.near.put(key, verdict)
        await self.far.put(key, verdict)


_memory = MemoryVerdictCache(0)
os.register_at_fork(after_in_child=lambda: setattr(_memory, "_lock", threading.Lock()))


def verdict_cache(settings: ChalkSettings) -> VerdictCache | None:
    """The cache the settings ask for, or ``None`` when caching is off.

    Memory when ``rubric_cache_entries`` is positive; Redis when the settings name
    a cluster (``redis_url``) and ``rubric_cache_ttl_s`` is positive; both, memory first.
    """
    memory: VerdictCache | None = None
    if settings.rubric_cache_entries > 0:
        _memory.max_entries = settings.rubric_cache_entries
        memory = _memory
    shared: VerdictCache | None = None
    if settings.redis_url and settings.rubric_cache_ttl_s > 0:
        shared = RedisVerdictCache(loop_redis(settings.redis_url), settings.rubric_cache_ttl_s)
    if memory is not None and shared is not None:
        return LayeredVerdictCache(memory, shared)
    return memory or shared
