"""Rubric grading: 100 jobs x 5 criteria through a real worker, the LLM answering in 200 ms.

A loopback chat-completions server (``chalk_worker.testing.fake_openai``, in this
process) answers every call after ``--latency`` seconds. A real ``chalk worker``
process on a private redis-server grades a batch submitted with ``ChalkClient``,
its calls going through the real ``openai`` client under the in-flight cap.

Printed: one call's latency measured over calls made one after another, the
sequential time (calls x latency), each round's wall time, the speedup over
sequential (goal >= 30x on 2 cores) and the ratio of the time to the bound
(calls x latency / cap: the cap's worth of calls always in flight).

The verdict cache stays on, as in production, but cannot flatter the figures:
every job (of every round) grades a transcript of its own, and the server's
count of calls per round is printed beside the expected count.

    .venv/bin/python -m bench.rubric [--jobs 100] [--criteria 5] [--latency 0.2]
                                     [--cap 64] [--concurrency 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from dataclasses import dataclass

import openai

from bench.cluster import chalk_workers
from bench.suite import Figure
from chalk_client import ChalkClient, JobStatus, Message, ScoringJob, Transcript
from chalk_client.judges import RubricJudge
from chalk_worker.testing.fake_openai import FakeOpenAI
from chalk_worker.testing.redis_server import redis_server

GOAL = 30.0
"""The speedup over sequential calls the rubric judge must reach."""


@dataclass(frozen=True)
class Measured:
    """What one benchmark run measured."""

    calls: int
    latency_s: float
    cap: int
    one_call_s: float
    """A call's mean latency, measured over calls made one after another."""
    rounds_s: list[float]
    calls_seen: list[int]
    """Calls the server received in each round."""
    max_in_flight: int

    @property
    def sequential_s(self) -> float:
        """Every call one after another at the nominal latency."""
        return self.calls * self.latency_s

    @property
    def bound_s(self) -> float:
        """Every call at the nominal latency, the cap's worth always in flight."""
        return self.calls * self.latency_s / self.cap


def one_call_latency(url: str, count: int) -> float:
    """Mean seconds of ``count`` chat completions made one after another."""
    client = openai.OpenAI(base_url=url, api_key="bench", max_retries=0)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "warm"}])
    started = time.perf_counter()
    for n in range(count):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"{n}"}])
    client.close()
    return (time.perf_counter() - started) / count


def rubric_jobs(count: int, criteria: int, tag: str) -> list[ScoringJob]:
    """``count`` jobs of ``criteria`` criteria each, every transcript distinct (no cache hit)."""
    judge = RubricJudge(
        rubric=[
            {"criterion": f"Criterion {k}: the answer is right" + (" (met)" if k % 2 else "")}
            for k in range(criteria)
        ]
    )
    return [
        ScoringJob(
            transcript=Transcript(
                messages=[Message(role="assistant", content=f"answer {n} of run {tag}")]
            ),
            judge=judge,
        )
        for n in range(count)
    ]


def measure(
    jobs: int, criteria: int, latency_s: float, cap: int, concurrency: int, rounds: int
) -> Measured:
    """Grade ``rounds`` batches through one worker; time each."""
    with FakeOpenAI(latency_s=latency_s) as fake, redis_server() as url:
        one_call_s = one_call_latency(fake.url, 20)
        env = {
            "OPENAI_BASE_URL": fake.url,
            "OPENAI_API_KEY": "bench",
            "CHALK_LLM_MAX_IN_FLIGHT": str(cap),
        }
        pool = ["--pool", "threads", "--concurrency", str(concurrency)]
        with chalk_workers(url, pool, env=env), ChalkClient(url) as client:
            client.submit_batch(rubric_jobs(1, 1, "warm-up")).results(timeout=120)
            rounds_s: list[float] = []
            calls_seen: list[int] = []
            fake.max_in_flight = 0
            for _ in range(rounds):
                batch_jobs = rubric_jobs(jobs, criteria, uuid.uuid4().hex)
                before = fake.calls
                started = time.perf_counter()
                results = client.submit_batch(batch_jobs).results(timeout=600)
                rounds_s.append(time.perf_counter() - started)
                calls_seen.append(fake.calls - before)
                failed = [r for r in results if r.status is not JobStatus.SUCCEEDED]
                if failed:
                    raise SystemExit(f"{len(failed)} jobs failed, e.g.: {failed[0].error}")
    return Measured(
        calls=jobs * criteria,
        latency_s=latency_s,
        cap=cap,
        one_call_s=one_call_s,
        rounds_s=rounds_s,
        calls_seen=calls_seen,
        max_in_flight=fake.max_in_flight,
    )


def figures(smoke: bool = False) -> list[Figure]:
    """The suite's figure: the speedup of rubric grading over sequential calls (goal >= 30)."""
    jobs, rounds = (20, 1) if smoke else (100, 3)
    run = measure(jobs, 5, 0.2, 64, 64, rounds)
    median = statistics.median(run.rounds_s)
    return [
        Figure(
            name=f"rubric grading, {jobs} jobs x 5 criteria at 200 ms",
            value=f"{median:.2f} s",
            baseline=f"sequential {run.sequential_s:.0f} s",
            ratio=run.sequential_s / median,
            goal=f">= {GOAL:g}",
        )
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--criteria", type=int, default=5)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per call")
    parser.add_argument("--cap", type=int, default=64, help="CHALK_LLM_MAX_IN_FLIGHT")
    parser.add_argument("--concurrency", type=int, default=64, help="jobs the worker holds")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    run = measure(args.jobs, args.criteria, args.latency, args.cap, args.concurrency, args.rounds)
    best, median = min(run.rounds_s), statistics.median(run.rounds_s)
    print(
        f"{args.jobs} jobs x {args.criteria} criteria = {run.calls} calls at "
        f"{args.latency * 1000:.0f} ms; 1 worker process (threads, {args.concurrency} jobs), "
        f"in-flight cap {args.cap}"
    )
    print(
        f"one call, measured 20 times one after another: {run.one_call_s * 1000:.1f} ms "
        f"-> {run.calls} calls in sequence: {run.calls * run.one_call_s:.1f} s measured, "
        f"{run.sequential_s:.1f} s nominal (calls x latency)"
    )
    print(
        "verdict cache: on, but every job's transcript is distinct: calls reaching the server "
        f"per round {', '.join(map(str, run.calls_seen))} (expected {run.calls}); "
        f"most in flight at once: {run.max_in_flight}"
    )
    print(f"wall time per round: {', '.join(f'{s:.2f} s' for s in run.rounds_s)}")
    print(
        f"speedup over sequential ({run.sequential_s:.0f} s): best {run.sequential_s / best:.1f}x, "
        f"median {run.sequential_s / median:.1f}x (goal >= {GOAL:g}x)"
    )
    print(
        f"bound (calls x latency / cap = {run.bound_s:.2f} s): best {best / run.bound_s:.2f}x, "
        f"median {median / run.bound_s:.2f}x the bound (1.00 = the cap always full)"
    )


if __name__ == "__main__":
    main()
