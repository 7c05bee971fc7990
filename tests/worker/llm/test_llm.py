"""The LLM pool: one per process (after a fork too), one client per loop, pacing, the cache."""

from __future__ import annotations

import asyncio
import os
import time

from support import say

from chalk_client import JobStatus, ScoringJob
from chalk_client.judges import RubricJudge
from chalk_worker import score_job
from chalk_worker.llm.client import LLMServer, ProcessSlots, llm_pool
from chalk_worker.llm.rate import MemoryRateLimiter
from chalk_worker.llm.verdict_cache import CachedVerdict, MemoryVerdictCache
from chalk_worker.testing.fake_openai import FakeOpenAI


def test_a_forked_worker_makes_its_own_pool_and_client():
    with FakeOpenAI() as fake:
        settings = fake.settings()
        parent_pool = llm_pool(settings)

        async def parent_client() -> None:
            parent_pool.client(LLMServer.from_settings(settings))

        asyncio.run(parent_client())
        pid = os.fork()
        if pid == 0:  # the child: a Celery prefork worker, say
            try:
                job = ScoringJob(
                    transcript=say("x"), judge=RubricJudge(rubric=[{"criterion": "a (met)"}])
                )
                result = score_job(job, settings=settings)
                fresh = llm_pool(settings) is not parent_pool
                os._exit(0 if result.status is JobStatus.SUCCEEDED and fresh else 1)
            except BaseException:
                os._exit(2)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert fake.calls == 1
        assert llm_pool(settings) is parent_pool


def test_one_client_per_event_loop_reused_within_it():
    with FakeOpenAI() as fake:
        settings = fake.settings()
        server = LLMServer.from_settings(settings)
        pool = llm_pool(settings)

        async def twice() -> tuple[object, object]:
            try:
                return pool.client(server), pool.client(server)
            finally:
                await pool.close()

        first, again = asyncio.run(twice())
        other, _ = asyncio.run(twice())
        assert first is again and other is not first


def test_the_request_rate_is_paced():
    limiter = MemoryRateLimiter(per_minute=1200)  # one every 50 ms

    async def ten() -> float:
        started = time.monotonic()
        await asyncio.gather(*(limiter.acquire() for _ in range(10)))
        return time.monotonic() - started

    assert 0.4 <= asyncio.run(ten()) < 1.0


def test_slots_cap_concurrent_holders_and_survive_cancellation():
    slots = ProcessSlots(2)
    held = 0
    most = 0

    async def hold() -> None:
        nonlocal held, most
        await slots.acquire()
        try:
            held += 1
            most = max(most, held)
            await asyncio.sleep(0.01)
        finally:
            held -= 1
            slots.release()

    async def main() -> None:
        first = [asyncio.create_task(hold()) for _ in range(2)]
        await asyncio.sleep(0)
        queued = asyncio.create_task(hold())
        await asyncio.sleep(0)
        assert len(slots._waiters) == 1  # it waits for a slot...
        queued.cancel()  # ...and gives up
        rest = [asyncio.create_task(hold()) for _ in range(8)]
        await asyncio.gather(*first, *rest)
        assert queued.cancelled()

    asyncio.run(main())
    assert most == 2 and slots.in_use == 0


def test_the_memory_cache_keeps_the_most_recent_verdicts():
    cache = MemoryVerdictCache(2)

    async def use() -> list[CachedVerdict | None]:
        await cache.put("a", CachedVerdict(True, "a"))
        await cache.put("b", CachedVerdict(False, "b"))
        await cache.get("a")
        await cache.put("c", CachedVerdict(True, "c"))
        return [await cache.get(key) for key in ("a", "b", "c")]

    a, b, c = asyncio.run(use())
    assert a == CachedVerdict(True, "a") and b is None and c == CachedVerdict(True, "c")


def test_without_a_cluster_the_cluster_rate_paces_this_process():
    with FakeOpenAI() as fake:
        settings = fake.settings(llm_cluster_requests_per_minute=1200)  # one every 50 ms
        judge = RubricJudge(rubric=[{"criterion": f"criterion {k}"} for k in range(6)])
        result = score_job(ScoringJob(transcript=say("x"), judge=judge), settings=settings)
        assert result.status is JobStatus.SUCCEEDED
        starts = sorted(seen.started for seen in fake.requests)
        assert starts[-1] - starts[0] >= 5 * 0.05 * 0.9


def test_the_pool_sends_what_chat_completions_create_would_send():
    # The pool posts the request itself (skipping the SDK's typed-dict walk): the
    # server must see the very bytes and headers that ``create`` sends.
    import openai
    from openai.types.chat import ChatCompletion

    from chalk_worker.llm.verdicts import RESPONSE_FORMAT, build_messages

    request = {
        "model": "judge-model",
        "messages": build_messages("cites a source", "user: é\x00 \U0001f600", structured=True),
        "response_format": RESPONSE_FORMAT,
        "temperature": 0.0,
    }
    with FakeOpenAI() as fake:
        settings = fake.settings()
        server = LLMServer.from_settings(settings)

        async def both() -> tuple[ChatCompletion, ChatCompletion]:
            pool = llm_pool(settings)
            ours = await pool.complete(server, timeout_s=10, **request)
            sdk = openai.AsyncOpenAI(base_url=server.base_url, api_key=server.api_key)
            theirs = await sdk.chat.completions.create(timeout=10, **request)  # type: ignore[call-overload]
            await sdk.close()
            await pool.close()
            return ours, theirs

        ours, theirs = asyncio.run(both())
        assert isinstance(ours, ChatCompletion)
        assert ours.choices[0].message.content == theirs.choices[0].message.content
        first, second = fake.requests
        assert first.raw == second.raw
        assert first.path == second.path == "/v1/chat/completions"
        assert first.headers == second.headers
