"""The LLM pool: one per process (after a fork too), one client per loop, pacing, the cache."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time

import openai
import pytest
from support import say

from chalk_client import ChalkSettings, JobStatus, ScoringJob
from chalk_client.judges import RubricJudge
from chalk_worker import score_job
from chalk_worker.llm.client import (
    Completion,
    LLMServer,
    ProcessSlots,
    describe_failure,
    llm_pool,
)
from chalk_worker.llm.rate import MemoryRateLimiter
from chalk_worker.llm.verdict_cache import CachedVerdict, MemoryVerdictCache
from chalk_worker.testing.fake_openai import FakeOpenAI, Reply


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
    # The pool posts the request itself (skipping the SDK's typed-dict walk) over
    # aiohttp: the server must see the very bytes and headers that ``create`` sends,
    # and the pool must read the same answer from the reply.
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

        async def both() -> tuple[Completion, ChatCompletion]:
            pool = llm_pool(settings)
            ours = await pool.complete(server, timeout_s=10, **request)
            sdk = openai.AsyncOpenAI(base_url=server.base_url, api_key=server.api_key)
            theirs = await sdk.chat.completions.create(timeout=10, **request)  # type: ignore[call-overload]
            await sdk.close()
            await pool.close()
            return ours, theirs

        ours, theirs = asyncio.run(both())
        assert ours.content == theirs.choices[0].message.content
        assert theirs.usage is not None
        assert ours.prompt_tokens == theirs.usage.prompt_tokens
        assert ours.completion_tokens == theirs.usage.completion_tokens
        first, second = fake.requests
        assert first.raw == second.raw
        assert first.path == second.path == "/v1/chat/completions"
        # Header names are case-insensitive; aiohttp and httpx spell them differently.
        assert {k.lower(): v for k, v in first.headers.items()} == {
            k.lower(): v for k, v in second.headers.items()
        }


def complete_once(settings: ChalkSettings, timeout_s: float = 10) -> BaseException | None:
    """One pool request with no retries; the error it raised (``None``: it answered)."""
    server = LLMServer.from_settings(settings.model_copy(update={"llm_max_retries": 0}))

    async def ask() -> BaseException | None:
        pool = llm_pool(settings)
        try:
            await pool.complete(server, timeout_s=timeout_s, model="m", messages=[])
        except Exception as exc:  # the error is what the test looks at
            return exc
        finally:
            await pool.close()
        return None

    return asyncio.run(ask())


def test_a_refused_connection_is_a_connection_error_not_a_timeout():
    # aiohttp's transport in the SDK calls a refused connection a ConnectTimeout.
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    error = complete_once(ChalkSettings(llm_base_url=url, llm_api_key="k"))
    assert isinstance(error, openai.APIConnectionError)
    assert not isinstance(error, openai.APITimeoutError)
    assert describe_failure(error).startswith("the server could not be reached: ")


def test_a_server_that_hangs_up_is_a_connection_error():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def hang_up() -> None:
            connection, _ = listener.accept()
            connection.recv(65536)
            connection.close()

        thread = threading.Thread(target=hang_up, daemon=True)
        thread.start()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        error = complete_once(ChalkSettings(llm_base_url=url, llm_api_key="k"))
        thread.join(timeout=10)
    assert isinstance(error, openai.APIConnectionError)
    assert not isinstance(error, openai.APITimeoutError)
    assert "could not be reached" in describe_failure(error)


def test_a_reply_slower_than_the_timeout_is_a_timeout():
    with FakeOpenAI() as fake:
        fake.fail_next(Reply(delay_s=3.0))
        error = complete_once(fake.settings(), timeout_s=0.3)
    assert isinstance(error, openai.APITimeoutError)
    assert describe_failure(error) == "the request timed out"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            b'{"choices": [{"message": {"content": "YES"}}], '
            b'"usage": {"prompt_tokens": 7, "completion_tokens": 2}}',
            Completion(content="YES", prompt_tokens=7, completion_tokens=2),
        ),
        (
            b'{"choices": [{"message": {"content": null, "refusal": "no"}}]}',
            Completion(content=None, refusal="no"),
        ),
        (b'{"choices": [{"message": "YES"}], "usage": "many"}', Completion(content=None)),
        (
            b'{"choices": [{"message": {"content": 1}}], '
            b'"usage": {"prompt_tokens": true, "completion_tokens": "2"}}',
            Completion(content=None),
        ),
        (b"[1, 2]", Completion(content=None)),
    ],
)
def test_a_reply_reads_what_is_there_and_nothing_else(body, expected):
    assert Completion.from_json(body) == expected


@pytest.mark.parametrize("body", [b"not JSON", b"[" * 5000 + b"]" * 5000])
def test_a_body_that_is_not_json_is_a_value_error(body):
    with pytest.raises(ValueError):
        Completion.from_json(body)
