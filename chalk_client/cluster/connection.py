"""Connecting to the cluster's Redis, and naming it in messages without its password."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from typing import TypeVar, Unpack
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
import redis.asyncio

from chalk_client.cluster.sentinel import (
    ConnectionOptions,
    SentinelURL,
    blocking_pool_async,
    connect_sentinel,
    connect_sentinel_async,
    is_sentinel,
)
from chalk_client.errors import ConfigurationError

_T = TypeVar("_T")

READ_TIMEOUT_S = 10.0
"""Longest wait for one reply. Blocking pops wait less than this (a client's wait
blocks for ``WAIT_SLICE_S`` at a time), so a reply that takes longer means a lost
connection, not a slow queue; a lossy link slows replies by a second or two at most."""

TIMEOUTS: ConnectionOptions = {
    "socket_connect_timeout": 5,
    "socket_timeout": READ_TIMEOUT_S,
    "socket_keepalive": True,
}
"""How every client of the cluster connects over TCP: 5 s to connect, ``READ_TIMEOUT_S``
for a reply, and TCP keepalive (a peer gone silent is noticed on an idle connection)."""

UNIX_TIMEOUTS: ConnectionOptions = {"socket_connect_timeout": 5, "socket_timeout": READ_TIMEOUT_S}
"""The same over a Unix socket (which has no keepalive)."""

URL_FORMS = (
    "redis://[[user]:password@]host:port/db (e.g. redis://127.0.0.1:6379/0), "
    "rediss://... for TLS, unix:///path/to/redis.sock?db=0, or through Redis Sentinel "
    "sentinel://[:password@]host:26379;sentinel://host2:26379/0?master_name=NAME"
)
"""What a valid Redis URL looks like, for error messages."""


def redacted(url: str) -> str:
    """``url`` with its password hidden, for messages and logs."""
    if is_sentinel(url):
        url = re.sub(r"(sentinel_password=)[^&]*", r"\1***", url)  # whatever it holds
        return ";".join(_redacted_part(part) for part in url.split(";"))
    return _redacted_part(url)


def _redacted_part(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit((parts.scheme, user + host, parts.path, parts.query, parts.fragment))


def shown_url(url: str) -> str:
    """``url`` for a message: its password hidden, even if the URL is malformed."""
    try:
        return redacted(url)
    except ValueError:
        return "(a malformed URL)" if "@" in url else url


def checked_url(url: str, connect: Callable[[str], _T]) -> _T:
    """``connect(url)``; a URL it cannot parse raises ``ConfigurationError`` saying why."""
    try:
        return connect(url)
    except ValueError as exc:
        shown = repr(shown_url(url))
        if is_sentinel(url) and ("@" in url or "password" in url):
            shown = "The sentinel:// URL (not shown: a password in it may be malformed)"
        raise ConfigurationError(
            f"{shown} is not a Redis URL ({exc}); give one like {URL_FORMS} "
            "(CHALK_REDIS_URL, or ChalkClient(redis_url=...))"
        ) from exc


def is_unix(url: str) -> bool:
    """Whether ``url`` names Redis by a Unix socket (``unix:///path/to/redis.sock``)."""
    return url.startswith("unix://")


def timeouts(url: str) -> ConnectionOptions:
    """The connection options of a client of ``url`` (``TIMEOUTS``, or ``UNIX_TIMEOUTS``)."""
    return UNIX_TIMEOUTS.copy() if is_unix(url) else TIMEOUTS.copy()


def connect(url: str) -> redis.Redis:
    """A Redis client of the cluster (bytes in and out; ``TIMEOUTS``).

    Raises ``ConfigurationError`` for a URL that is not a Redis URL.
    """
    make = connect_sentinel if is_sentinel(url) else redis.Redis.from_url
    client: redis.Redis = checked_url(url, partial(make, **timeouts(url)))
    return client


def connect_async(url: str) -> redis.asyncio.Redis:
    """An asyncio Redis client of the cluster, as ``connect`` makes them."""
    make = connect_sentinel_async if is_sentinel(url) else redis.asyncio.Redis.from_url
    client: redis.asyncio.Redis = checked_url(url, partial(make, **timeouts(url)))
    return client


def blocking_pool(
    url: str, *, max_connections: int, timeout: float, **kwargs: Unpack[ConnectionOptions]
) -> redis.asyncio.ConnectionPool:
    """An asyncio pool of at most ``max_connections`` that waits ``timeout`` for a free one."""
    if is_sentinel(url):
        return blocking_pool_async(url, max_connections=max_connections, timeout=timeout, **kwargs)
    pool: redis.asyncio.ConnectionPool = redis.asyncio.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=timeout, **kwargs
    )
    return pool


def kombu_socket_url(url: str, transport: str = "redis") -> str:
    """A ``unix://`` URL in the form Celery and kombu read: ``redis+socket:///path`` (the
    transport or backend named before the ``+``), the database as ``virtual_host`` and
    any login kept (``ConfigurationError`` if it names no socket)."""
    parts = urlsplit(url)
    if not parts.path:
        raise ConfigurationError(
            f"{shown_url(url)!r} names no socket; give one like {URL_FORMS} "
            "(CHALK_REDIS_URL, or ChalkClient(redis_url=...))"
        )
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "db"]
    query.append(("virtual_host", dict(parse_qsl(parts.query)).get("db", "0")))
    login = parts.netloc.rpartition("@")[0]
    return f"{transport}+socket://{login + '@' if login else ''}{parts.path}?{urlencode(query)}"


def sentinel_url(url: str) -> SentinelURL | None:
    """``url`` parsed if it names Redis through its sentinels (``ConfigurationError`` if
    malformed), else ``None``."""
    if not is_sentinel(url):
        return None
    parsed: SentinelURL = checked_url(url, SentinelURL.parse)
    return parsed
