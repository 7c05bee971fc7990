"""Remembered verdicts, so grading the same work against the same criterion costs no call.

A verdict is keyed by a hash of everything that decided it: the server, the
model, the prompt version, the criterion and the rendered context. Only real
YES/NO verdicts are kept, never an unscored criterion. The default cache lives
in the worker process; a shared one (Redis) implements the same two methods.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from chalk_client.settings import ChalkSettings


@dataclass(frozen=True)
class CachedVerdict:
    """What is remembered of a verdict: met or not, and why."""

    met: bool
    reason: str


def verdict_key(
    *, server: str, model: str, prompt_version: str, criterion: str, context: str
) -> str:
    """The cache key of one verdict: a SHA-256 over everything that decided it."""
    parts = json.dumps([prompt_version, server, model, criterion, context], ensure_ascii=False)
    return hashlib.sha256(parts.encode()).hexdigest()


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


_memory = MemoryVerdictCache(0)
os.register_at_fork(after_in_child=lambda: setattr(_memory, "_lock", threading.Lock()))


def verdict_cache(settings: ChalkSettings) -> VerdictCache | None:
    """The cache the settings ask for, or ``None`` when caching is off."""
    if settings.rubric_cache_entries <= 0:
        return None
    _memory.max_entries = settings.rubric_cache_entries
    return _memory
