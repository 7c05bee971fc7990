"""``JobStore`` for asyncio: the same commands (queued by ``chalk_client.store``), awaited."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from functools import partial
from typing import Any

import redis
import redis.asyncio
from redis.exceptions import NoScriptError

from chalk_client import keys
from chalk_client.jobs import JobResult
from chalk_client.records import PreparedJob, load_result
from chalk_client.scripts import ALL
from chalk_client.settings import ChalkSettings
from chalk_client.store import (
    CHUNK,
    DRAIN,
    JobState,
    as_text,
    checked_url,
    chunk_replies,
    distinct_blobs,
    first_error,
    merge_replies,
    parse_states,
    plan_chunks,
    queue_batch_index,
    queue_blob_refresh,
    queue_published,
    queue_release,
    queue_states,
    queue_submit_chunk,
    queue_watches,
    reaching,
)


def connect_async(url: str) -> redis.asyncio.Redis:
    """An asyncio Redis client for the store (bytes in and out; no read timeout).

    Raises ``ConfigurationError`` for a URL that is not a Redis URL.
    """
    client: redis.asyncio.Redis = checked_url(
        url,
        partial(redis.asyncio.Redis.from_url, socket_connect_timeout=5, socket_keepalive=True),
    )
    return client


class AsyncJobStore:
    """Awaitable access to the cluster's jobs and results, for ``AsyncChalkClient``."""

    def __init__(self, client: redis.asyncio.Redis, settings: ChalkSettings, url: str) -> None:
        self.redis = client
        self.settings = settings
        self.url = url

    async def _pipeline(self, build: Callable[[Any], object], *, each: bool = False) -> list[Any]:
        """See ``JobStore._pipeline``."""
        previous: list[Any] | None = None
        with reaching(self.url):
            for _ in range(2):
                pipe = self.redis.pipeline(transaction=False)
                build(pipe)
                replies = merge_replies(previous, await pipe.execute(raise_on_error=False))
                if not any(isinstance(reply, NoScriptError) for reply in replies):
                    break
                previous = replies
                for script in ALL:
                    await self.redis.script_load(script.text)
            error = first_error(replies)
            if error is not None and not each:
                raise error
            return replies

    async def submit(
        self,
        jobs: Sequence[PreparedJob],
        *,
        waiter: str,
        messages: Callable[[str], tuple[str, str]] | None,
        retry_failed: bool = False,
        batch_id: str | None = None,
    ) -> AsyncIterator[tuple[Sequence[PreparedJob], list[str | Exception]]]:
        """See ``JobStore.submit``."""
        settings = self.settings
        if batch_id is not None:
            listed = set(await self.batch_ids(batch_id))
            ids = [job.job_id for job in jobs if job.job_id not in listed]
            await self._pipeline(
                partial(queue_batch_index, batch_id=batch_id, job_ids=ids, settings=settings)
            )
        blobs = distinct_blobs(jobs)
        alive = await self._pipeline(
            partial(queue_blob_refresh, digests=list(blobs), settings=settings)
        )
        missing = {digest for digest, kept in zip(blobs, alive, strict=True) if not kept}
        for chunk, writes in plan_chunks(jobs, blobs, missing):
            build = partial(
                queue_submit_chunk,
                chunk=chunk,
                blobs=writes,
                settings=settings,
                waiter=waiter,
                messages=messages,
                retry_failed=retry_failed,
                batch_id=batch_id,
            )
            yield chunk, chunk_replies(chunk, writes, await self._pipeline(build, each=True))

    async def published(self, job_ids: Sequence[str], waiter: str) -> None:
        """See ``JobStore.published``."""
        if job_ids:
            await self._pipeline(partial(queue_published, job_ids=job_ids, waiter=waiter))

    async def release(self, job_ids: Sequence[str], waiter: str) -> list[str]:
        """See ``JobStore.release``."""
        if not job_ids:
            return []
        replies = await self._pipeline(partial(queue_release, job_ids=job_ids, waiter=waiter))
        return [as_text(reply) for reply in replies]

    async def watch(self, job_ids: Sequence[str], waiter: str) -> list[str]:
        """See ``JobStore.watch``."""
        replies: list[str] = []
        for start in range(0, len(job_ids), CHUNK):
            part = job_ids[start : start + CHUNK]
            build = partial(queue_watches, job_ids=part, waiter=waiter, settings=self.settings)
            replies.extend(as_text(reply) for reply in await self._pipeline(build))
        return replies

    async def pop_done(self, waiter: str, timeout: float) -> list[str]:
        """See ``JobStore.pop_done``."""
        key = keys.done(waiter)
        with reaching(self.url):
            if timeout <= 0:
                now: Any = await self.redis.lpop(key, DRAIN)
                return [as_text(item) for item in now or []]
            first: Any = await self.redis.blpop([key], timeout=timeout)
            if first is None:
                return []
            rest: Any = await self.redis.lpop(key, DRAIN)
        return [as_text(first[1]), *(as_text(item) for item in rest or [])]

    async def forget(self, waiter: str) -> None:
        """See ``JobStore.forget``."""
        with reaching(self.url):
            await self.redis.delete(keys.done(waiter))

    async def results(self, job_ids: Sequence[str]) -> list[JobResult | None]:
        """See ``JobStore.results``."""
        found: list[JobResult | None] = []
        with reaching(self.url):
            for start in range(0, len(job_ids), CHUNK * 4):
                part = [keys.result(i) for i in job_ids[start : start + CHUNK * 4]]
                raws: Any = await self.redis.mget(part)
                found.extend(load_result(raw) for raw in raws)
        return found

    async def batch_ids(self, batch_id: str) -> list[str]:
        """See ``JobStore.batch_ids``."""
        with reaching(self.url):
            ids: Any = await self.redis.lrange(keys.batch(batch_id), 0, -1)
        return [as_text(i) for i in ids]

    async def states(self, job_ids: Sequence[str]) -> list[JobState]:
        """See ``JobStore.states``."""
        states: list[JobState] = []
        for start in range(0, len(job_ids), CHUNK):
            part = job_ids[start : start + CHUNK]
            states.extend(parse_states(await self._pipeline(partial(queue_states, job_ids=part))))
        return states
