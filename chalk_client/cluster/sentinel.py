"""Redis Sentinel: the cluster's Redis named by the sentinels that watch it.

With Sentinel, ``CHALK_REDIS_URL`` names the sentinels and the master they
watch, in kombu's form (sentinels separated by ``;``) with the master's name in
the query::

    sentinel://[[user]:password@]host:port;sentinel://host:port;.../DB?master_name=NAME

The password (and user) are the master's, as in kombu and redis-py: the
sentinels themselves take none unless the query gives ``sentinel_password=``.
``DB`` and the query may sit on any one of the parts (usually the last). Each
connection asks the sentinels where the master is when it is made, so after a
failover new connections reach the promoted replica; a connection to the old
master fails, and the code using it retries as it does for any lost connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypedDict, Unpack, overload
from urllib.parse import parse_qs, quote, unquote, urlsplit

import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

SCHEME = "sentinel"
SENTINEL_TIMEOUT_S = 2.0
"""Longest wait for one sentinel's answer, asked once (no retries): a dead or hung
sentinel is skipped after it, and the one that answered is asked first next time."""
ENCODE = "percent-encode '@', ':', '/', ';', '#', '&' and '%' in passwords (e.g. '@' as %40)"
QUERY_KEYS = ("master_name", "sentinel_password")


class ConnectionOptions(TypedDict, total=False):
    """Keyword arguments of a Redis client or pool that Chalk sets (each as redis-py's)."""

    socket_timeout: float
    socket_connect_timeout: float
    socket_keepalive: bool
    retry: Retry | AsyncRetry


class Login(TypedDict, total=False):
    """Keyword arguments that choose a Redis server's database and log in to it."""

    db: int
    username: str
    password: str


class _SentinelLogin(TypedDict, total=False):
    socket_timeout: float
    socket_connect_timeout: float
    password: str


class SentinelOptions(_SentinelLogin, total=False):
    """Keyword arguments of a client of one sentinel (``sentinel_kwargs``)."""

    retry: Retry


class AsyncSentinelOptions(_SentinelLogin, total=False):
    """``SentinelOptions`` of an asyncio client."""

    retry: AsyncRetry


class KombuSentinelOptions(TypedDict):
    """The transport options of Chalk's Sentinel transport (and Celery's backend)."""

    master_name: str
    sentinel_kwargs: SentinelOptions
    chalk_sentinels: list[list[str | int]]


def is_sentinel(url: str) -> bool:
    """Whether ``url`` names Redis through its sentinels."""
    return url.lower().startswith(SCHEME + "://")


@dataclass(frozen=True)
class SentinelURL:
    """A parsed ``sentinel://`` URL: where the sentinels are and which master to ask for."""

    sentinels: tuple[tuple[str, int], ...]
    master_name: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None

    @classmethod
    def parse(cls, url: str) -> SentinelURL:
        """Parse ``url``; ``ValueError`` says what is wrong with it."""
        found: dict[str, str] = {}
        sentinels = [_read_part(part, found) for part in url.split(";") if part.strip()]
        if not sentinels:
            raise ValueError("it names no sentinel")
        if not found.get("master_name"):
            raise ValueError(
                "it does not name the master the sentinels watch: add ?master_name=NAME "
                "(the name in the sentinels' `sentinel monitor NAME ...`)"
            )
        return cls(
            sentinels=tuple(sentinels),
            master_name=found["master_name"],
            db=int(found.get("db", "0")),
            username=found.get("username"),
            password=found.get("password"),
            sentinel_password=found.get("sentinel_password"),
        )

    def master_kwargs(self) -> Login:
        """What a connection to the master (or a replica) needs: its database and login."""
        made: Login = {"db": self.db}
        if self.username:
            made["username"] = self.username
        if self.password is not None:
            made["password"] = self.password
        return made

    @overload
    def sentinel_kwargs(self, *, asynchronous: Literal[False] = False) -> SentinelOptions: ...
    @overload
    def sentinel_kwargs(self, *, asynchronous: Literal[True]) -> AsyncSentinelOptions: ...

    def sentinel_kwargs(
        self, *, asynchronous: bool = False
    ) -> SentinelOptions | AsyncSentinelOptions:
        """What a connection to a sentinel needs: short timeouts, no retries (the next
        sentinel is the retry), and its password if any."""
        login: _SentinelLogin = {
            "socket_timeout": SENTINEL_TIMEOUT_S,
            "socket_connect_timeout": SENTINEL_TIMEOUT_S,
        }
        if self.sentinel_password is not None:
            login["password"] = self.sentinel_password
        if asynchronous:
            return AsyncSentinelOptions(**login, retry=AsyncRetry(NoBackoff(), 0))
        return SentinelOptions(**login, retry=Retry(NoBackoff(), 0))

    def kombu_url(self) -> str:
        """The broker URL Celery is given: the first sentinel alone, in kombu's form.

        Given several ``;``-separated URLs, Celery moves to the next after a
        connection error, and kombu then makes that URL's transport, its own
        rather than Chalk's; the sentinels are in ``kombu_options`` instead.
        """
        return self._part(*self.sentinels[0])

    def backend_url(self) -> str:
        """The result backend's URL: every sentinel, login and database on each part."""
        return ";".join(self._part(host, port) for host, port in self.sentinels)

    def _part(self, host: str, port: int) -> str:
        login = ""
        user = quote(self.username or "", safe="")
        if self.password is not None:
            login = f"{user}:{quote(self.password, safe='')}@"
        elif user:
            login = f"{user}@"
        return f"sentinel://{login}{_bracketed(host)}:{port}/{self.db}"

    def kombu_options(self) -> KombuSentinelOptions:
        """The transport options Chalk's Sentinel transport (and Celery's backend) need."""
        return {
            "master_name": self.master_name,
            "sentinel_kwargs": self.sentinel_kwargs(),
            "chalk_sentinels": [list(address) for address in self.sentinels],
        }

    def shown(self) -> str:
        """The URL for a message: the sentinels, the master's name, no password."""
        where = ";".join(f"{_bracketed(host)}:{port}" for host, port in self.sentinels)
        return f"sentinel://{where}/{self.db}?master_name={self.master_name}"


def _bracketed(host: str) -> str:
    """``host`` as a URL names it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


def _read_part(part: str, found: dict[str, str]) -> tuple[str, int]:
    """One ``sentinel://`` part's address; what else it gives is added to ``found``.

    Messages never quote the part: a password with a character it should have
    percent-encoded would show in them.
    """
    parts = urlsplit(part.strip())
    if parts.scheme.lower() != SCHEME:
        raise ValueError(f"every part must start with sentinel:// ({ENCODE})")
    if parts.fragment:
        raise ValueError(f"it holds a '#' ({ENCODE})")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"a sentinel's port is not a number ({ENCODE})") from None
    if not parts.hostname:
        raise ValueError(f"a sentinel part names no host ({ENCODE})")
    if parts.username:
        _agree(found, "username", unquote(parts.username))
    if parts.password is not None:
        _agree(found, "password", unquote(parts.password))
    db = parts.path.strip("/")
    if db:
        if not db.isdigit():
            raise ValueError(f"the database after the last '/' must be a number ({ENCODE})")
        _agree(found, "db", db)
    for key, values in parse_qs(parts.query, keep_blank_values=True).items():
        if key not in QUERY_KEYS:
            raise ValueError(
                f"an unknown query parameter (known: master_name, sentinel_password; {ENCODE})"
            )
        _agree(found, key, values[-1])
    return parts.hostname, port or 26379


def _agree(found: dict[str, str], key: str, value: str) -> None:
    """Note ``key`` as ``value``; the parts of one URL must not disagree."""
    if found.setdefault(key, value) != value:
        raise ValueError(f"its parts give different values of {key}")


def connect_sentinel(url: str, **kwargs: Unpack[ConnectionOptions]) -> redis.Redis:
    """A client of the master the sentinels of ``url`` name, following failovers."""
    parsed = SentinelURL.parse(url)
    manager = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
        list(parsed.sentinels), sentinel_kwargs=parsed.sentinel_kwargs(), **kwargs
    )
    client: redis.Redis = manager.master_for(  # type: ignore[no-untyped-call, unused-ignore]
        parsed.master_name, redis_class=redis.Redis, **parsed.master_kwargs()
    )
    return client


def connect_sentinel_async(url: str, **kwargs: Unpack[ConnectionOptions]) -> redis.asyncio.Redis:
    """``connect_sentinel`` for asyncio."""
    parsed = SentinelURL.parse(url)
    manager = redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
        list(parsed.sentinels), sentinel_kwargs=parsed.sentinel_kwargs(asynchronous=True), **kwargs
    )
    client: redis.asyncio.Redis = manager.master_for(
        parsed.master_name, redis_class=redis.asyncio.Redis, **parsed.master_kwargs()
    )
    return client


class BlockingSentinelPool(
    redis.asyncio.sentinel.SentinelConnectionPool, redis.asyncio.BlockingConnectionPool
):
    """An asyncio pool of connections to the current master that waits for a free one.

    redis-py's Sentinel pool refuses a connection past ``max_connections``; this
    one waits up to ``timeout``, as ``BlockingConnectionPool`` does.
    """


def blocking_pool_async(
    url: str, *, max_connections: int, timeout: float, **kwargs: Unpack[ConnectionOptions]
) -> redis.asyncio.ConnectionPool:
    """An asyncio pool of at most ``max_connections`` to the master ``url`` names."""
    parsed = SentinelURL.parse(url)
    manager = redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
        list(parsed.sentinels), sentinel_kwargs=parsed.sentinel_kwargs(asynchronous=True)
    )
    return BlockingSentinelPool(  # type: ignore[no-untyped-call, unused-ignore]
        parsed.master_name,
        manager,
        max_connections=max_connections,
        timeout=timeout,
        **parsed.master_kwargs(),
        **kwargs,
    )
