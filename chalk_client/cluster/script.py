"""Lua scripts and the pipelines that run them, the same way for client and workers.

Each step of a job's life that must not interleave with another is one Lua
script (``Script``); every script made registers itself, so that after Redis
forgets them (a restart, ``SCRIPT FLUSH``) ``run_pipeline`` loads them all and
runs the pipeline again. Commands are queued on a ``Pipeline`` by the builders
of this package and run in one round trip; replies are read by its parsers.

Times come from Redis's own clock (``NOW_MS``), so workers on machines with
skewed clocks agree. Over ``maxmemory`` Redis refuses a script at its first
write that may use memory, unless the script has already written: scripts that
must run on a full Redis begin with a write that never needs memory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis
import redis.asyncio
from redis.exceptions import NoScriptError

SCRIPTS: list[Script] = []
"""Every script made, in the order made: what is loaded again after ``NOSCRIPT``."""


@dataclass(frozen=True)
class Script:
    """A Lua script, run by its SHA1 (``EVALSHA``), loaded again when Redis forgot it."""

    name: str
    text: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.text.encode()).hexdigest())
        SCRIPTS.append(self)


NOW_MS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""
"""Lua that sets ``now`` to Redis's time in milliseconds."""

NO_MEMORY_WRITE = """
redis.call('ZREM', KEYS[1], '')  -- a write that needs no memory: the script runs whole
"""
"""Lua that writes without using memory (``KEYS[1]`` must be a sorted set or absent)."""


class Pipeline(Protocol):
    """The commands builders queue: those of ``redis.Redis.pipeline()`` and its asyncio twin.

    Queuing returns the pipeline itself; replies come from running it.
    """

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any: ...
    def set(self, name: str, value: Any, *, ex: int | None = None) -> Any: ...
    def get(self, name: str) -> Any: ...
    def hget(self, name: str, key: str) -> Any: ...
    def exists(self, *names: str) -> Any: ...
    def expire(self, name: str, time: int) -> Any: ...
    def rpush(self, name: str, *values: Any) -> Any: ...
    def llen(self, name: str) -> Any: ...
    def zadd(self, name: str, mapping: dict[Any, Any], *, gt: bool = False) -> Any: ...
    def zscore(self, name: str, value: str) -> Any: ...
    def zremrangebyrank(self, name: str, start: int, end: int) -> Any: ...
    def wait(self, num_replicas: int, timeout: int) -> Any: ...


Build = Callable[[Pipeline], object]
"""Queues commands on a pipeline."""


def queue_script(pipe: Pipeline, script: Script, keys: Sequence[str], args: Sequence[Any]) -> None:
    """Queue one ``EVALSHA`` of ``script`` on ``pipe``."""
    pipe.evalsha(script.sha, len(keys), *keys, *args)


def merge_replies(before: list[Any] | None, after: list[Any]) -> list[Any]:
    """Replies of a pipeline run again after ``NOSCRIPT``: the first run's successes stand."""
    if before is None:
        return after
    return [a if isinstance(b, Exception) else b for b, a in zip(before, after, strict=True)]


def first_error(replies: Sequence[Any]) -> Exception | None:
    """The first error among pipeline replies, if any."""
    return next((reply for reply in replies if isinstance(reply, Exception)), None)


def as_text(value: bytes | str) -> str:
    """A Redis reply as text."""
    return value.decode() if isinstance(value, bytes) else value


def _forgotten(replies: Sequence[Any]) -> bool:
    return any(isinstance(reply, NoScriptError) for reply in replies)


def run_pipeline(client: redis.Redis, build: Build) -> list[Any]:
    """Run what ``build`` queues in one round trip; per-command errors are in the replies.

    Scripts Redis has forgotten are loaded (all of them) and the pipeline run
    again; the first run's successes stand. Connection errors are raised.
    """
    pipe: Any = client.pipeline(transaction=False)
    build(pipe)
    replies: list[Any] = pipe.execute(raise_on_error=False)
    if not _forgotten(replies):
        return replies
    for script in SCRIPTS:
        client.script_load(script.text)
    pipe = client.pipeline(transaction=False)
    build(pipe)
    return merge_replies(replies, pipe.execute(raise_on_error=False))


async def run_pipeline_async(client: redis.asyncio.Redis, build: Build) -> list[Any]:
    """``run_pipeline`` for an asyncio client."""
    pipe: Any = client.pipeline(transaction=False)
    build(pipe)
    replies: list[Any] = await pipe.execute(raise_on_error=False)
    if not _forgotten(replies):
        return replies
    for script in SCRIPTS:
        loaded: Awaitable[Any] = client.script_load(script.text)
        await loaded
    pipe = client.pipeline(transaction=False)
    build(pipe)
    return merge_replies(replies, await pipe.execute(raise_on_error=False))


def run_script(
    client: redis.Redis, script: Script, keys: Sequence[str], args: Sequence[Any]
) -> Any:
    """Run one script (loaded again if Redis forgot it); its reply, or its error raised."""
    reply = run_pipeline(client, lambda pipe: queue_script(pipe, script, keys, args))[0]
    if isinstance(reply, Exception):
        raise reply
    return reply
