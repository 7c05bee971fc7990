"""The LLM pool: one place where a worker process talks to its OpenAI-compatible server.

Every rubric request goes through ``LLMPool.complete``, which holds the
process-wide cap on requests in flight (``CHALK_LLM_MAX_IN_FLIGHT``, all jobs
and event loops of the process together). Every HTTP request it sends, retries
included, is paced first: by this process's rate (``CHALK_LLM_REQUESTS_PER_MINUTE``)
and the cluster's, shared through Redis (``CHALK_LLM_CLUSTER_REQUESTS_PER_MINUTE``,
see ``chalk_worker.llm.rate``). The
``AsyncOpenAI`` client is made lazily, per process (so a Celery worker makes
it after the fork) and per event loop (an HTTP connection pool belongs to one
loop), then reused, connections included. Retries with exponential backoff and
jitter on 429, 5xx, timeouts and connection errors, ``Retry-After`` honoured,
are the ``openai`` client's own (``CHALK_LLM_MAX_RETRIES``).

What a request costs this process's CPU matters: a trainer scoring in its own
process, or a worker on two cores, pays it for every criterion of every job
(``bench.llm_cpu``). So the client sends over aiohttp (``openai.DefaultAioHttpClient``)
rather than its default httpx transport, and the pool reads the reply's body once,
with orjson, into a ``Completion`` of the four fields a verdict needs, instead of
building the SDK's pydantic ``ChatCompletion``.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import httpx
import openai
import orjson

from chalk_client.errors import LLMUnavailableError
from chalk_client.settings import ChalkSettings, LLMSettings
from chalk_worker.llm.hooks import HOOKS
from chalk_worker.llm.loop_redis import close_loop_redis, loop_redis
from chalk_worker.llm.rate import MemoryRateLimiter, RateLimiter, RedisRateLimiter

OPENAI_DEFAULT_URL = "https://api.openai.com/v1"
SETTINGS_NOTE = (
    "LLM settings (OPENAI_BASE_URL, OPENAI_API_KEY, CHALK_RUBRIC_MODEL, CHALK_LLM_*) are read "
    "by the process that scores the job, here {worker}: on a cluster, set them where the "
    "workers run (not where chalk score runs); `chalk health` shows each worker's LLM server "
    "and model"
)
"""Added to the errors a client sees when the LLM cannot be used: whose settings count."""


def configured_base_url(settings: LLMSettings) -> str:
    """The server rubric judges ask: ``CHALK_LLM_BASE_URL``, ``OPENAI_BASE_URL`` or OpenAI's."""
    return settings.llm_base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_DEFAULT_URL


def configured_api_key(settings: LLMSettings) -> str | None:
    """The API key rubric judges send: ``CHALK_LLM_API_KEY`` or ``OPENAI_API_KEY``; ``None``."""
    key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
    return key or os.environ.get("OPENAI_API_KEY") or None


@dataclass(frozen=True)
class LLMServer:
    """Where rubric requests go and how they are sent: one client per distinct value."""

    base_url: str
    api_key: str = field(repr=False)
    max_retries: int
    timeout_s: float

    @classmethod
    def from_settings(cls, settings: LLMSettings) -> LLMServer:
        """The server the settings name, falling back to ``OPENAI_BASE_URL``/``OPENAI_API_KEY``."""
        base_url = configured_base_url(settings)
        key = configured_api_key(settings)
        if not key:
            if base_url == OPENAI_DEFAULT_URL:
                raise LLMUnavailableError(
                    "rubric judges need an LLM: set OPENAI_API_KEY (or CHALK_LLM_API_KEY), or "
                    "point OPENAI_BASE_URL (or CHALK_LLM_BASE_URL) at an OpenAI-compatible server"
                )
            key = "no-key"  # local servers (vLLM without --api-key) accept anything
        return cls(
            base_url=base_url.rstrip("/"),
            api_key=key,
            max_retries=settings.llm_max_retries,
            timeout_s=settings.llm_request_timeout_s,
        )


@dataclass(frozen=True)
class Completion:
    """What a verdict needs of a chat completion: the first choice's message and the usage."""

    content: str | None
    """The first choice's message content (``None`` when the reply has none)."""
    refusal: str | None = None
    """The first choice's refusal, when the model refused instead of answering."""
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @classmethod
    def from_json(cls, body: bytes) -> Completion:
        """Read a reply's body; what the server left out or sent malformed reads as missing.

        Raises ``ValueError`` when the body is not JSON (or nested too deeply to read).
        """
        data = orjson.loads(body)
        message: object = None
        choices = data.get("choices") if isinstance(data, dict) else None
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            message = choices[0].get("message")
        if not isinstance(message, dict):
            message = {}
        usage = data.get("usage") if isinstance(data, dict) else None
        if not isinstance(usage, dict):
            usage = {}
        return cls(
            content=_typed(message.get("content"), str),
            refusal=_typed(message.get("refusal"), str),
            prompt_tokens=_typed(usage.get("prompt_tokens"), int) or 0,
            completion_tokens=_typed(usage.get("completion_tokens"), int) or 0,
        )


_T = TypeVar("_T")


def _typed(value: object, kind: type[_T]) -> _T | None:
    return value if isinstance(value, kind) and not isinstance(value, bool) else None


class ProcessSlots:
    """A semaphore shared by every event loop and thread of the process.

    ``asyncio.Semaphore`` belongs to one loop; ``score_job`` called from several
    threads runs several loops, and the cap must hold for all of them.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.in_use = 0
        self._lock = threading.Lock()
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()

    def resize(self, size: int) -> None:
        """Change the cap; requests already in flight finish."""
        with self._lock:
            self.size = size
        self._wake()

    async def acquire(self) -> None:
        """Wait for a free slot."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self.in_use < self.size and not self._waiters:
                self.in_use += 1
                return
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append((loop, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            with self._lock:
                queued = (loop, waiter) in self._waiters
                if queued:
                    self._waiters.remove((loop, waiter))
            if not queued and waiter.done() and not waiter.cancelled():
                self.release()  # granted just as we were cancelled: hand it on
            raise

    def release(self) -> None:
        """Free a slot, handing it to the longest waiter."""
        with self._lock:
            self.in_use -= 1
        self._wake()

    def _wake(self) -> None:
        while True:
            with self._lock:
                if not self._waiters or self.in_use >= self.size:
                    return
                loop, waiter = self._waiters.popleft()
                self.in_use += 1
            try:
                loop.call_soon_threadsafe(self._grant, waiter)
            except RuntimeError:  # that loop is closed: its waiter is gone
                with self._lock:
                    self.in_use -= 1

    def _grant(self, waiter: asyncio.Future[None]) -> None:
        if waiter.done():  # cancelled while the grant was on its way
            self.release()
        else:
            waiter.set_result(None)


class AsyncOpenAI(openai.AsyncOpenAI):
    """``openai.AsyncOpenAI`` remembering the URLs it made of paths: every rubric request
    asks for the same path, and joining it to the base URL again (two URL parses) cost 9%
    of a request's CPU (``bench.llm_cpu``). Named as its parent: the SDK sends the class's
    name in the User-Agent header."""

    _prepared: dict[tuple[str, str], Any]  # the SDK's URL type (httpx's, or its own copy's)

    def _prepare_url(self, url: str) -> Any:
        prepared = getattr(self, "_prepared", None)
        if prepared is None:
            prepared = self._prepared = {}
        key = (str(self.base_url), url)
        found = prepared.get(key)
        if found is None:
            found = prepared[key] = super()._prepare_url(url)
        return found


class LLMPool:
    """This process's clients, in-flight cap, rate limits and per-server knowledge."""

    def __init__(self, settings: ChalkSettings) -> None:
        self.pid = os.getpid()
        self.slots = ProcessSlots(settings.llm_max_in_flight)
        self.rate_limiter: RateLimiter = MemoryRateLimiter(settings.llm_requests_per_minute)
        self.cluster_rate = (settings.redis_url, settings.llm_cluster_requests_per_minute)
        """The cluster's Redis (``None``: this process is the cluster) and requests a minute."""
        self._cluster_limiters: dict[str, RateLimiter] = {}
        self.last_problem: dict[str, str] = {}
        """Base URL → the last retryable HTTP error it answered (for deadline messages)."""
        self._plain_only: set[tuple[str, str]] = set()
        self._clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[LLMServer, openai.AsyncOpenAI]
        ] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def configure(self, settings: ChalkSettings) -> None:
        """Apply the settings' cap and rate (they may differ between calls in tests)."""
        if self.slots.size != settings.llm_max_in_flight:
            self.slots.resize(settings.llm_max_in_flight)
        limiter = self.rate_limiter
        if isinstance(limiter, MemoryRateLimiter):
            limiter.per_minute = settings.llm_requests_per_minute
        cluster_rate = (settings.redis_url, settings.llm_cluster_requests_per_minute)
        if cluster_rate != self.cluster_rate:
            with self._lock:
                self.cluster_rate = cluster_rate
                self._cluster_limiters = {}

    def cluster_limiter(self, base_url: str) -> RateLimiter | None:
        """The cluster-wide limiter of requests to ``base_url``; ``None`` without a limit."""
        url, per_minute = self.cluster_rate
        if per_minute <= 0:
            return None
        with self._lock:
            limiter = self._cluster_limiters.get(base_url)
            if limiter is None:
                limiter = (
                    RedisRateLimiter(loop_redis(url), base_url, per_minute)
                    if url
                    else MemoryRateLimiter(per_minute)  # embedded: this process is the cluster
                )
                self._cluster_limiters[base_url] = limiter
        return limiter

    async def pace(self, base_url: str) -> None:
        """Wait until this process's and the cluster's rates let one more request start."""
        await self.rate_limiter.acquire()
        limiter = self.cluster_limiter(base_url)
        if limiter is not None:
            await limiter.acquire()

    def client(self, server: LLMServer) -> openai.AsyncOpenAI:
        """The client for ``server`` in the running event loop, made on first use."""
        loop = asyncio.get_running_loop()
        with self._lock:
            clients = self._clients.setdefault(loop, {})
            client = clients.get(server)
            if client is None:
                client = AsyncOpenAI(
                    base_url=server.base_url,
                    api_key=server.api_key,
                    max_retries=server.max_retries,
                    timeout=server.timeout_s,
                    # The SDK's own defaults (1000 connections, 100 kept alive) over aiohttp,
                    # which costs about a third less CPU per request than its httpx
                    # transport (bench.llm_cpu), plus pacing of every request (retries
                    # too) and a watcher of the replies.
                    http_client=openai.DefaultAioHttpClient(
                        event_hooks={
                            "request": [self._pacer(server.base_url)],
                            "response": [self._watch(server.base_url)],
                        },
                    ),
                )
                clients[server] = client
        return client

    def _pacer(self, base_url: str) -> Callable[[httpx.Request], Awaitable[None]]:
        async def pace(request: httpx.Request) -> None:
            HOOKS.llm_request(request)
            await self.pace(base_url)

        return pace

    def _watch(self, base_url: str) -> Callable[[httpx.Response], Awaitable[None]]:
        async def record(response: httpx.Response) -> None:
            HOOKS.llm_response(response.status_code)
            if response.status_code in (408, 409, 429) or response.status_code >= 500:
                after = response.headers.get("retry-after")
                note = f" (Retry-After: {after})" if after else ""
                self.last_problem[base_url] = f"HTTP {response.status_code}{note}"

        return record

    def plain_only(self, server: LLMServer, model: str) -> bool:
        """Whether this server refused structured output for this model before."""
        return (server.base_url, model) in self._plain_only

    def remember_plain_only(self, server: LLMServer, model: str) -> None:
        """Ask this server for plain YES/NO text from now on."""
        self._plain_only.add((server.base_url, model))

    async def complete(
        self, server: LLMServer, *, timeout_s: float, **request: object
    ) -> Completion:
        """One chat completion, under the cap and the rate limits, with the client's retries.

        The slot is held through the retries and their backoff, so a server in
        trouble gets fewer requests from this process, not more; each attempt
        waits for its turn under the rate limits (``pace``) while holding it.
        Raises the ``openai`` client's errors for the caller to judge, and
        ``ValueError`` for a reply whose body is not JSON.
        """
        await self.slots.acquire()
        try:
            client = self.client(server)
            # The client's generic ``post`` sends the same body, with the same retries
            # and errors, as ``chat.completions.create``, without ``create``'s walk of
            # the request through every member of its typed-dict unions (our plain JSON
            # request has nothing for it to rename); asking for the raw response skips
            # the build of a pydantic ``ChatCompletion`` of which a verdict reads four
            # fields. Each cost more CPU than the rest of the request (BENCHMARKS.md).
            try:
                response = await client.post(
                    "/chat/completions",
                    body=request,
                    cast_to=httpx.Response,
                    options={"timeout": timeout_s},
                )
            except openai.APITimeoutError as exc:
                failure = connection_failure(exc)
                if failure is None:
                    raise
                raise openai.APIConnectionError(request=exc.request) from failure
            return Completion.from_json(response.content)
        finally:
            self.slots.release()

    async def close(self) -> None:
        """Close the running loop's clients (before that loop ends)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            clients = self._clients.pop(loop, {})
        for client in clients.values():
            await client.close()


_pool: LLMPool | None = None
_pool_lock = threading.Lock()


def _forget_after_fork() -> None:
    # A thread of the parent may have held these locks; the child starts afresh.
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def llm_pool(settings: ChalkSettings) -> LLMPool:
    """This process's pool, made on first use and again after a fork."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool.pid != os.getpid():
            _pool = LLMPool(settings)
        else:
            _pool.configure(settings)
        return _pool


async def close_llm_clients() -> None:
    """Close this process's LLM and Redis clients of the running loop, before the loop ends."""
    pool = _pool
    if pool is not None and pool.pid == os.getpid():
        await pool.close()
    await close_loop_redis()


def connection_failure(exc: openai.APITimeoutError) -> aiohttp.ClientConnectionError | None:
    """The connection failure behind a "timeout", when aiohttp's transport mislabelled one.

    The SDK's aiohttp transport maps any ``aiohttp.ClientConnectionError`` it has no
    better name for to ``httpx.ConnectTimeout`` (a refused connection, a server
    that hung up), and the SDK then raises ``APITimeoutError``. The SDK retries both
    alike; only the error the caller sees, and so its message, would be wrong.
    """
    cause = exc.__cause__
    while cause is not None and not isinstance(cause, aiohttp.ClientError):
        cause = cause.__cause__
    if isinstance(cause, aiohttp.ClientConnectionError) and not isinstance(cause, TimeoutError):
        return cause
    return None


def describe_failure(exc: BaseException) -> str:
    """What went wrong with a request, in words an operator can act on."""
    if isinstance(exc, openai.APITimeoutError):
        return "the request timed out"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        detail = f": {type(cause).__name__}: {cause}" if cause else ""
        return f"the server could not be reached{detail}"
    if isinstance(exc, openai.APIStatusError):
        return f"the server answered HTTP {exc.status_code}: {exc.message}"
    return f"{type(exc).__name__}: {exc}"
