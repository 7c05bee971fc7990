"""verl's reward loop scoring a step's responses with Chalk: which reward function to name.

verl 0.7 and later (checked with 0.9.1) hand the reward function one response
per call and await a step's responses at once. Three ways for Chalk to be
called, each through verl's own ``RewardLoopManager`` (``bench.verl_loop``)
with ``--workers`` reward workers, on the embedded queue and on a cluster:

- ``compute_score``: a plain function, which verl runs in its thread pool (a
  few responses at a time per reward worker);
- per call: a coroutine that sends each response to Chalk as a batch of its
  own (``compute_score_per_call`` below: ``compute_score_async`` before it
  gathered concurrent calls);
- ``compute_score_async``: the calls that arrive together go as one batch.

The judge is a rubric of one criterion, so that the time is the LLM's: a
loopback chat-completions server (``chalk_worker.testing.fake_openai``) answers every
call after ``--latency`` seconds; the verdict caches are off, so every round
makes every call. Printed per way and queue: each round's seconds, the median,
and its ratio to the LLM bound (responses x latency / calls allowed in flight:
``CHALK_LLM_MAX_IN_FLIGHT`` per reward worker here, per worker process on the
cluster).

Needs verl (``bench.verl_loop`` says how to install it without its GPU stack)::

    .venv/bin/python -m bench.verl_reward [--responses 128] [--latency 0.2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.cluster import chalk_workers
from bench.verl_loop import (
    compose,
    make_tokenizer,
    ray_session,
    responses_batch,
    reward_loop,
    scores,
)
from chalk_client.integrations import verl
from chalk_worker.testing.fake_openai import FakeOpenAI
from chalk_worker.testing.redis_server import redis_server

CAP = 64
"""``CHALK_LLM_MAX_IN_FLIGHT``: LLM calls one process has in flight."""

WAYS = {
    "compute_score (thread pool)": "pkg://chalk_client.integrations.verl:compute_score",
    "one batch per call": "pkg://bench.verl_reward:compute_score_per_call",
    "compute_score_async (gathered)": "pkg://chalk_client.integrations.verl:compute_score_async",
}


async def compute_score_per_call(
    data_source: Any,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    **reward_kwargs: Any,
) -> float:
    """One response sent to Chalk as a batch of its own (no gathering)."""
    reward = verl.configured(reward_kwargs)
    sample = verl.sample_from(0, data_source, solution_str, ground_truth, extra_info)
    [result] = await reward.scorer.score_async([sample], concurrency=1)
    return result.score if result.score is not None else reward.failed_value


def rows(count: int) -> list[dict[str, Any]]:
    """``count`` responses, every other one meeting the criterion, all distinct."""
    tag = uuid.uuid4().hex[:8]
    return [
        {"response": f"answer {n} of {tag}" + (" (met)" if n % 2 else ""), "ground_truth": ""}
        for n in range(count)
    ]


def overrides(target: str, redis_url: str | None) -> list[str]:
    """The command-line overrides that name ``target`` with a one-criterion rubric judge."""
    path, name = target.rsplit(":", 1)
    kwargs = "+reward.custom_reward_function.reward_kwargs"
    found = [
        f"reward.custom_reward_function.path={path}",
        f"reward.custom_reward_function.name={name}",
        f"{kwargs}.judge={{type: rubric, rubric: [{{criterion: 'the answer is right'}}]}}",
    ]
    if redis_url:
        found.append(f"{kwargs}.redis_url='{redis_url}'")
    return found


def measure(
    target: str, count: int, rounds: int, workers: int, redis_url: str | None
) -> list[float]:
    """Seconds of each round of ``count`` responses through verl's reward loop."""
    with tempfile.TemporaryDirectory(prefix="verl-tokenizer-") as folder:
        tokenizer = make_tokenizer(Path(folder))
        config = compose(
            [
                *overrides(target, redis_url),
                f"actor_rollout_ref.model.path={folder}",
                f"reward.num_workers={workers}",
            ]
        )
        with reward_loop(config) as manager:
            scores(manager, responses_batch(tokenizer, rows(workers)))  # warm-up
            seconds = []
            for _ in range(rounds):
                batch_rows = rows(count)
                started = time.perf_counter()
                got = scores(manager, responses_batch(tokenizer, batch_rows))
                seconds.append(time.perf_counter() - started)
                expected = [float(n % 2) for n in range(count)]
                if got != expected:
                    raise SystemExit(f"{target}: wrong scores {got[:8]}..., not {expected[:8]}...")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--responses", type=int, default=128)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="verl's reward.num_workers")
    parser.add_argument("--only", choices=("embedded", "cluster"), help="one queue only")
    args = parser.parse_args()
    queues = [args.only] if args.only else ["embedded", "cluster"]
    with ExitStack() as stack:
        fake = stack.enter_context(FakeOpenAI(latency_s=args.latency))
        env = {
            "OPENAI_BASE_URL": fake.url,
            "OPENAI_API_KEY": "bench",
            "CHALK_LLM_MAX_IN_FLIGHT": str(CAP),
            "CHALK_RUBRIC_CACHE_ENTRIES": "0",
            "CHALK_RUBRIC_CACHE_TTL_S": "0",
        }
        os.environ.update(env)  # the reward workers (Ray actors) start with it
        stack.enter_context(ray_session())
        print(f"{args.responses} responses, one LLM call each at {args.latency} s; {CAP} in flight")
        for queue in queues:
            url = None
            processes = args.workers
            if queue == "cluster":
                url = stack.enter_context(redis_server())
                stack.enter_context(chalk_workers(url, [], env=env))  # chalk worker's defaults
                processes = 1
            bound = args.responses * args.latency / (CAP * processes)
            for label, target in WAYS.items():
                seconds = measure(target, args.responses, args.rounds, args.workers, url)
                median = statistics.median(seconds)
                rounds = ", ".join(f"{s:.2f}" for s in seconds)
                print(
                    f"{queue:9} {label:32} median {median:.2f} s ({rounds}); "
                    f"{median / bound:.2f}x the bound {bound:.2f} s"
                )


if __name__ == "__main__":
    main()
