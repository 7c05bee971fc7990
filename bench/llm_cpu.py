"""CPU per LLM call: Chalk's rubric path against the bare ``openai`` client and raw aiohttp.

Every LLM call a rubric judge makes costs CPU in the process that makes it; a
trainer scoring in its own process, or a worker on two cores, pays it call by
call. This measures that cost, as process CPU time (``time.process_time``, every
thread of this process; the server's work is not counted) per call, for:

- ``score_jobs``: whole rubric jobs (``--criteria`` calls each) scored by
  ``score_jobs``, so the job's orchestration is counted with its calls;
- ``LLMPool.complete``: the pool's call alone, the request a criterion sends;
- ``openai``: ``AsyncOpenAI().chat.completions.create`` on its default (httpx)
  transport, the same request;
- ``aiohttp``: one ``aiohttp.ClientSession`` posting the same JSON body and
  ``json.loads`` of the reply: about the least a Python client can do.

All four talk to the same loopback chat-completions server
(``chalk_worker.testing.fake_openai``) in a process of its own, answering after
``--latency`` seconds, with ``--in-flight`` calls at once (the pool's cap for
the first two, a semaphore for the others). Each case is warmed up first
(connections opened, modules loaded), then timed over ``--rounds`` rounds of
``--calls`` calls; the median round is printed. The goal: Chalk's rubric call
(``score_jobs``) at <= 1.0 ms of CPU.

    .venv/bin/python -m bench.llm_cpu [--calls 500] [--criteria 5] [--latency 0.2]
                                      [--in-flight 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bench.inprocess import check, fresh_jobs, llm_server
from bench.suite import Figure

GOAL_MS = 1.0
"""CPU milliseconds per call of Chalk's rubric path (``score_jobs``)."""


@dataclass(frozen=True)
class Case:
    """One way of making the calls: CPU milliseconds per call, round by round."""

    name: str
    rounds_ms: list[float]

    @property
    def median_ms(self) -> float:
        """The median round's CPU milliseconds per call."""
        return statistics.median(self.rounds_ms)


def chat_request(n: int) -> dict[str, object]:
    """The request a rubric judge sends for one criterion (a distinct one per ``n``)."""
    from chalk_worker.llm.verdicts import RESPONSE_FORMAT, build_messages

    context = f"=== transcript ===\nassistant: answer {n} of this run"
    messages = build_messages(f"Criterion {n % 5}: the answer is right", context, structured=True)
    return {"model": "bench", "messages": messages, "response_format": RESPONSE_FORMAT}


def cpu_ms_per_call(calls: int, run: Callable[[], object]) -> float:
    """Process CPU milliseconds per call of one ``run()`` making ``calls`` calls."""
    started = time.process_time()
    run()
    return (time.process_time() - started) * 1000 / calls


async def gather_limited(calls: int, in_flight: int, call: Callable[[int], Awaitable[str]]) -> None:
    """``calls`` calls, ``in_flight`` at a time; exits if a reply has no verdict in it."""
    limit = asyncio.Semaphore(in_flight)

    async def one(n: int) -> None:
        async with limit:
            content = await call(n)
        if "verdict" not in content:
            raise SystemExit(f"a reply without a verdict: {content!r:.200}")

    await asyncio.gather(*(one(n) for n in range(calls)))


async def timed_rounds(
    calls: int, in_flight: int, rounds: int, call: Callable[[int], Awaitable[str]]
) -> list[float]:
    """A warm-up of ``in_flight`` calls, then CPU milliseconds per call of each round."""
    await gather_limited(in_flight, in_flight, call)
    measured: list[float] = []
    for _ in range(rounds):
        started = time.process_time()
        await gather_limited(calls, in_flight, call)
        measured.append((time.process_time() - started) * 1000 / calls)
    return measured


def measure_score_jobs(calls: int, criteria: int, rounds: int) -> Case:
    """Whole rubric jobs through ``score_jobs``, on this process's own event loop."""
    from chalk_worker import score_jobs

    jobs = calls // criteria
    score_jobs(fresh_jobs(jobs, criteria))  # warm up: connections, task modules
    rounds_ms: list[float] = []
    for _ in range(rounds):
        batch = fresh_jobs(jobs, criteria)
        started = time.process_time()
        results = score_jobs(batch)
        rounds_ms.append((time.process_time() - started) * 1000 / (jobs * criteria))
        check(results, batch, criteria)
    return Case("Chalk: score_jobs, whole rubric jobs", rounds_ms)


def measure_pool(calls: int, in_flight: int, rounds: int) -> Case:
    """``LLMPool.complete`` alone, on the event loop ``score_jobs`` uses."""
    from chalk_client import ChalkSettings
    from chalk_worker.llm.client import LLMServer, llm_pool
    from chalk_worker.run.runner import start_in_process, wait_for

    settings = ChalkSettings()
    pool = llm_pool(settings)
    server = LLMServer.from_settings(settings)

    async def call(n: int) -> str:
        reply = await pool.complete(server, timeout_s=server.timeout_s, **chat_request(n))
        return reply.content or ""

    def run() -> None:
        # The pool's own cap (CHALK_LLM_MAX_IN_FLIGHT) holds the calls in flight.
        wait_for(start_in_process(gather_limited(calls, calls, call)))

    run()  # warm up
    return Case("Chalk: LLMPool.complete", [cpu_ms_per_call(calls, run) for _ in range(rounds)])


def measure_openai(url: str, calls: int, in_flight: int, rounds: int) -> Case:
    """The bare ``openai`` client on its default transport, one client for every round."""
    import openai

    async def rounds_of_calls() -> list[float]:
        client = openai.AsyncOpenAI(base_url=url, api_key="bench")

        async def call(n: int) -> str:
            reply = await client.chat.completions.create(**chat_request(n))  # type: ignore[call-overload]
            content: str = reply.choices[0].message.content or ""
            return content

        measured = await timed_rounds(calls, in_flight, rounds, call)
        await client.close()
        return measured

    return Case("openai: chat.completions.create (httpx)", asyncio.run(rounds_of_calls()))


def measure_aiohttp(url: str, calls: int, in_flight: int, rounds: int) -> Case:
    """Raw aiohttp: the same body posted, the reply read with ``json.loads``."""
    import aiohttp

    async def rounds_of_calls() -> list[float]:
        headers = {"Authorization": "Bearer bench", "Content-Type": "application/json"}
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=in_flight)
        ) as session:

            async def call(n: int) -> str:
                body = json.dumps(chat_request(n)).encode()
                async with session.post(
                    f"{url}/chat/completions", data=body, headers=headers
                ) as response:
                    reply = json.loads(await response.read())
                content: str = reply["choices"][0]["message"]["content"]
                return content

            return await timed_rounds(calls, in_flight, rounds, call)

    return Case("raw aiohttp + json.loads", asyncio.run(rounds_of_calls()))


def measure(calls: int, criteria: int, latency_s: float, in_flight: int, rounds: int) -> list[Case]:
    """Every case against one server process, in turn."""
    with llm_server(latency_s) as url:
        os.environ.update(
            OPENAI_BASE_URL=url, OPENAI_API_KEY="bench", CHALK_LLM_MAX_IN_FLIGHT=str(in_flight)
        )
        return [
            measure_score_jobs(calls, criteria, rounds),
            measure_pool(calls, in_flight, rounds),
            measure_openai(url, calls, in_flight, rounds),
            measure_aiohttp(url, calls, in_flight, rounds),
        ]


def figures(smoke: bool = False) -> list[Figure]:
    """The suite's figures: CPU per rubric call, against the goal and the bare clients."""
    calls, rounds = (100, 1) if smoke else (500, 3)
    jobs, pool, bare, raw = measure(calls, 5, 0.2, 64, rounds)
    return [
        Figure(
            name=f"CPU per rubric call, score_jobs, {calls} calls, 64 in flight",
            value=f"{jobs.median_ms:.2f} ms",
            baseline=f"goal {GOAL_MS:g} ms",
            ratio=jobs.median_ms / GOAL_MS,
            goal="<= 1.0",
        ),
        Figure(
            name="CPU per call, LLMPool.complete vs the bare openai client",
            value=f"{pool.median_ms:.2f} ms",
            baseline=f"openai {bare.median_ms:.2f} ms, aiohttp {raw.median_ms:.2f} ms",
            ratio=pool.median_ms / bare.median_ms,
            goal="<= 1.0",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500, help="calls per round and case")
    parser.add_argument("--criteria", type=int, default=5, help="criteria per rubric job")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per call")
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cases = measure(args.calls, args.criteria, args.latency, args.in_flight, args.rounds)
    raw = cases[-1].median_ms
    print(
        f"{args.calls} calls a round at {args.latency * 1000:.0f} ms, {args.in_flight} in "
        f"flight, {args.rounds} rounds; process CPU ms per call (median round)"
    )
    for case in cases:
        rounds = ", ".join(f"{ms:.2f}" for ms in case.rounds_ms)
        ratio = case.median_ms / raw
        print(f"{case.name:42} {case.median_ms:6.2f} ms  ({rounds}; {ratio:.1f}x aiohttp)")
    print(f"goal: score_jobs <= {GOAL_MS:g} ms per call")


if __name__ == "__main__":
    main()
