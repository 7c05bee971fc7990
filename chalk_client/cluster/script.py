"""Lua scripts and the pipelines that run them, the same way for client and workers.

Each step of a job's life that must not interleave with another is one Lua
script (``Script``); every script made registers itself, so that after Redis
forgets them (a restart, ``SCRIPT FLUSH``) ``run_pipeline`` loads them all and
runs the pipeline again. Commands are queued on a ``Pipeline`` by the builders
of this package and run in one round trip; replies are read by its parsers.

Under Redis's ACLs (``chalk_client.cluster.acl``) a script runs with its
caller's permissions: each command it runs is checked on the key it names,
declared in ``KEYS`` or reached by name (a lane, a ring, a done list), and every
declared key needs read and write permission whatever the script does with it.
A script that only reads is then out of reach of a read-only user: read with
plain commands instead (``callbacks.queue_read``).

Times come from Redis's own clock (``NOW_MS``), so workers on machines with
skewed clocks agree. Over ``maxmemory`` Redis refuses a script at its first
write that may use memory, unless the script has already written: scripts that
must run on a full Redis begin with a write that never needs memory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, TypeVar

import redis
import redis.asyncio
from redis.exceptions import NoScriptError

from chalk_client.errors import UnexpectedReplyError

_Kind = TypeVar("_Kind", bound=StrEnum)

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


Arg = bytes | str | int | float
"""A value a Redis command takes: a key, a field, a value, a number."""


class Pipeline(Protocol):
    """The commands builders queue: those of ``redis.Redis.pipeline()`` and its asyncio twin.

    Queuing returns the pipeline itself (nothing a builder reads); replies come
    from running it.
    """

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Arg) -> object: ...
    def set(self, name: str, value: Arg, *, ex: int | None = None) -> object: ...
    def get(self, name: str) -> object: ...
    def hget(self, name: str, key: str) -> object: ...
    def hmget(self, name: str, keys: Sequence[str]) -> object: ...
    def exists(self, *names: str) -> object: ...
    def expire(self, name: str, time: int) -> object: ...
    def rpush(self, name: str, *values: Arg) -> object: ...
    def llen(self, name: str) -> object: ...
    def zadd(self, name: str, mapping: dict[str, float], *, gt: bool = False) -> object: ...
    def zscore(self, name: str, value: str) -> object: ...
    def zremrangebyrank(self, name: str, start: int, end: int) -> object: ...
    def wait(self, num_replicas: int, timeout: int) -> object: ...
    def time(self) -> object: ...


Build = Callable[[Pipeline], object]
"""Queues commands on a pipeline."""


def queue_script(pipe: Pipeline, script: Script, keys: Sequence[str], args: Sequence[Arg]) -> None:
    """Queue one ``EVALSHA`` of ``script`` on ``pipe``."""
    pipe.evalsha(script.sha, len(keys), *keys, *args)


def merge_replies(before: list[object] | None, after: list[object]) -> list[object]:
    """Replies of a pipeline run again after ``NOSCRIPT``: the first run's successes stand."""
    if before is None:
        return after
    return [a if isinstance(b, Exception) else b for b, a in zip(before, after, strict=True)]


def first_error(replies: Sequence[object]) -> Exception | None:
    """The first error among pipeline replies, if any."""
    return next((reply for reply in replies if isinstance(reply, Exception)), None)


def _unexpected(value: object, expected: str) -> UnexpectedReplyError:
    return UnexpectedReplyError(
        f"Redis replied {value!r:.200} where {expected} was expected: is every client and "
        "worker of this cluster running the same chalk-queue version, and is nothing else "
        "writing chalk: keys?"
    )


def as_text(value: object) -> str:
    """A Redis reply as text; an error reply is raised, any other reply is unexpected."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, str):
        return value
    if isinstance(value, Exception):
        raise value
    raise _unexpected(value, "text")


def as_bytes(value: object) -> bytes:
    """A Redis reply as bytes (a record, an archive)."""
    if isinstance(value, bytes):
        return value
    return as_text(value).encode()


def as_int(value: object) -> int:
    """A Redis reply as an integer (also from its digits, as a script's table holds them)."""
    if isinstance(value, int):
        return value
    if isinstance(value, bytes | str):
        try:
            return int(value)
        except ValueError:
            pass
    if isinstance(value, Exception):
        raise value
    raise _unexpected(value, "an integer")


def as_list(value: object) -> list[object]:
    """A Redis reply that is an array (a script's table), as a list."""
    if isinstance(value, list):
        return value
    if isinstance(value, Exception):
        raise value
    raise _unexpected(value, "an array")


def parse_kind(kind: type[_Kind], value: object) -> _Kind:
    """A word a script replied, as the member of ``kind`` it names; any other word is
    unexpected (a script of another version)."""
    text = as_text(value)
    try:
        return kind(text)
    except ValueError:
        words = ", ".join(repr(member.value) for member in kind)
        raise _unexpected(text, f"one of {words}") from None


def _forgotten(replies: Sequence[object]) -> bool:
    return any(isinstance(reply, NoScriptError) for reply in replies)


def run_pipeline(client: redis.Redis, build: Build) -> list[object]:
    """Run what ``build`` queues in one round trip; per-command errors are in the replies.

    Scripts Redis has forgotten are loaded (all of them) and the pipeline run
    again; the first run's successes stand. Connection errors are raised.
    """
    pipe = client.pipeline(transaction=False)
    build(pipe)
    replies: list[object] = pipe.execute(raise_on_error=False)
    if not _forgotten(replies):
        return replies
    for script in SCRIPTS:
        client.script_load(script.text)
    pipe = client.pipeline(transaction=False)
    build(pipe)
    return merge_replies(replies, pipe.execute(raise_on_error=False))


async def run_pipeline_async(client: redis.asyncio.Redis, build: Build) -> list[object]:
    """``run_pipeline`` for an asyncio client."""
    pipe = client.pipeline(transaction=False)
    build(pipe)
    replies: list[object] = await pipe.execute(raise_on_error=False)
    if not _forgotten(replies):
        return replies
    for script in SCRIPTS:
        await client.script_load(script.text)
    pipe = client.pipeline(transaction=False)
    build(pipe)
    return merge_replies(replies, await pipe.execute(raise_on_error=False))


def run_script(
    client: redis.Redis, script: Script, keys: Sequence[str], args: Sequence[Arg]
) -> object:
    """Run one script (loaded again if Redis forgot it); its reply, or its error raised."""
    reply = run_pipeline(client, lambda pipe: queue_script(pipe, script, keys, args))[0]
    if isinstance(reply, Exception):
        raise reply
    return reply
