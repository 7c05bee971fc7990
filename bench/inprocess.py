"""In-process scoring: 100 rubric jobs x 5 criteria from 100 threads, and as one batch.

What a trainer does: its thread pool calls ``score_job`` once per rollout, or it
hands the whole batch to ``score_jobs``. Both run in this process, with no Redis
and no worker; the LLM is a loopback chat-completions server
(``chalk_worker.testing.fake_openai``) answering every call after ``--latency`` seconds,
run in a process of its own so that its threads do not compete with the
scorer's for this one's interpreter.

The baseline is sequential: every call made one after another, at the latency
of one call measured in the same run (20 calls through the ``openai`` client,
one after another). Printed: each case's wall time per round, its speedup over
sequential (goal: >= 45x for both) and the
ratio of its time to the bound (calls x latency / ``CHALK_LLM_MAX_IN_FLIGHT``).

The verdict cache stays on, as in production, but cannot flatter the figures:
every job of every round grades a transcript of its own, and the requests the
judges made (``rubric_calls`` in the results) are checked against the calls expected.

    .venv/bin/python -m bench.inprocess [--jobs 100] [--criteria 5] [--latency 0.2]
                                        [--threads 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

from bench.rubric import one_call_latency, rubric_jobs
from bench.suite import Figure
from chalk_client import JobResult, JobStatus, ScoringJob

THREADS_GOAL = 45.0
"""Speedup over sequential calls for ``score_job`` from 100 threads."""
BATCH_GOAL = 45.0
"""Speedup over sequential calls for one ``score_jobs`` call."""
CAP = 64
"""``CHALK_LLM_MAX_IN_FLIGHT``, its default."""


@contextmanager
def llm_server(latency_s: float) -> Iterator[str]:
    """A loopback chat-completions server in a child process; yields its base URL."""
    child = subprocess.Popen(
        [sys.executable, "-m", "bench.inprocess", "--serve", str(latency_s)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError(f"the LLM server did not start (it said {url!r})")
        yield url
    finally:
        assert child.stdin is not None
        child.stdin.close()  # the child serves until its stdin closes
        child.wait(timeout=30)


def serve(latency_s: float) -> None:
    """Serve chat completions until stdin closes (the child side of ``llm_server``)."""
    from chalk_worker.testing.fake_openai import FakeOpenAI

    with FakeOpenAI(latency_s=latency_s) as fake:
        print(fake.url, flush=True)
        sys.stdin.read()


@dataclass(frozen=True)
class Case:
    """One way of scoring a batch, timed over several rounds."""

    name: str
    rounds_s: list[float]


@dataclass(frozen=True)
class Measured:
    """What one benchmark run measured."""

    calls: int
    latency_s: float
    one_call_s: float
    """A call's mean latency, measured over calls made one after another."""
    cases: list[Case]

    @property
    def sequential_s(self) -> float:
        """Every call one after another, at the measured latency of one call."""
        return self.calls * self.one_call_s

    @property
    def bound_s(self) -> float:
        """Every call at the nominal latency, the cap's worth always in flight."""
        return self.calls * self.latency_s / CAP


def check(results: list[JobResult], jobs: list[ScoringJob], criteria: int) -> None:
    """Exit if a job failed, a result is out of place, or a verdict came from the cache."""
    failed = [r for r in results if r.status is not JobStatus.SUCCEEDED]
    if failed:
        raise SystemExit(f"{len(failed)} jobs failed, e.g.: {failed[0].error}")
    if [r.job_id for r in results] != [j.id for j in jobs]:
        raise SystemExit("results are not in job order")
    calls = sum(int(r.scoring.metadata["rubric_calls"]) for r in results if r.scoring)
    if calls != len(jobs) * criteria:
        raise SystemExit(f"{calls} LLM calls made, {len(jobs) * criteria} expected")


def fresh_jobs(count: int, criteria: int) -> list[ScoringJob]:
    """``count`` jobs with ids and transcripts no earlier round used."""
    tag = uuid.uuid4().hex
    return [
        job.model_copy(update={"id": f"{tag}-{n}"})
        for n, job in enumerate(rubric_jobs(count, criteria, tag))
    ]


def measure(jobs: int, criteria: int, latency_s: float, threads: int, rounds: int) -> Measured:
    """Time ``rounds`` batches scored from ``threads`` threads, then as ``score_jobs`` calls."""
    from chalk_worker import score_job, score_jobs

    with llm_server(latency_s) as url:
        os.environ.update(
            OPENAI_BASE_URL=url, OPENAI_API_KEY="bench", CHALK_LLM_MAX_IN_FLIGHT=str(CAP)
        )
        one_call_s = one_call_latency(url, 20)
        score_jobs(fresh_jobs(threads, 1))  # warm up: connections, task modules

        def from_threads(batch: list[ScoringJob]) -> list[JobResult]:
            with ThreadPoolExecutor(threads) as pool:
                return list(pool.map(score_job, batch))

        ways: list[tuple[str, Callable[[list[ScoringJob]], list[JobResult]]]] = [
            (f"{threads} threads x score_job", from_threads),
            ("score_jobs", score_jobs),
        ]
        cases: list[Case] = []
        for name, way in ways:
            rounds_s: list[float] = []
            for _ in range(rounds):
                batch = fresh_jobs(jobs, criteria)
                started = time.perf_counter()
                results = way(batch)
                rounds_s.append(time.perf_counter() - started)
                check(results, batch, criteria)
            cases.append(Case(name, rounds_s))
    return Measured(jobs * criteria, latency_s, one_call_s, cases)


def figures(smoke: bool = False) -> list[Figure]:
    """The suite's figures: speedups over sequential calls of 100 threads and of score_jobs."""
    jobs, rounds = (20, 1) if smoke else (100, 3)
    run = measure(jobs, 5, 0.2, jobs, rounds)
    goals = [THREADS_GOAL, BATCH_GOAL]
    return [
        Figure(
            name=f"in-process {case.name}, {jobs} jobs x 5 criteria at 200 ms",
            value=f"{statistics.median(case.rounds_s):.2f} s",
            baseline=f"sequential {run.sequential_s:.0f} s",
            ratio=run.sequential_s / statistics.median(case.rounds_s),
            goal=f">= {goal:g}",
        )
        for case, goal in zip(run.cases, goals, strict=True)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--criteria", type=int, default=5)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per call")
    parser.add_argument("--threads", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve)
        return
    run = measure(args.jobs, args.criteria, args.latency, args.threads, args.rounds)
    print(
        f"{args.jobs} jobs x {args.criteria} criteria = {run.calls} calls at "
        f"{args.latency * 1000:.0f} ms; one process, in-flight cap {CAP}"
    )
    print(
        f"one call, measured 20 times one after another: {run.one_call_s * 1000:.1f} ms "
        f"-> sequential {run.sequential_s:.1f} s; bound (calls x latency / cap) "
        f"{run.bound_s:.2f} s"
    )
    for case, goal in zip(run.cases, [THREADS_GOAL, BATCH_GOAL], strict=True):
        best, median = min(case.rounds_s), statistics.median(case.rounds_s)
        print(
            f"{case.name}: {', '.join(f'{s:.2f} s' for s in case.rounds_s)}; speedup best "
            f"{run.sequential_s / best:.1f}x, median {run.sequential_s / median:.1f}x "
            f"(goal >= {goal:g}x); median {median / run.bound_s:.2f}x the bound"
        )


if __name__ == "__main__":
    main()
