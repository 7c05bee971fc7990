"""A 10,000-job batch: the client's peak memory, and time against a 1,000-job batch.

Each batch is submitted by a fresh client process (so its peak RSS is its own)
to one ``chalk worker`` on a private redis-server, and waited for to the last
result. Goals: client peak memory < 200 MB; time(10k) / time(1k) <= 12.

    python -m bench.batch [--small 1000] [--large 10000]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

from bench.cluster import chalk_workers
from bench.suite import Figure
from chalk_worker.testing.redis_server import redis_server


def client(url: str, count: int) -> None:
    """In the child: submit ``count`` jobs with small transcripts, wait, report time and RSS."""
    from chalk_client import ChalkClient, Message, ScoringJob, Transcript
    from chalk_client.judges import RegexJudge

    judge = RegexJudge([r"answer: \d+"])
    with ChalkClient(url) as chalk:
        started = time.perf_counter()
        jobs = (
            ScoringJob(
                transcript=Transcript(
                    messages=[
                        Message(role="user", content=f"Question {n}: what is 6 x 7?"),
                        Message(role="assistant", content=f"Working on {n}... answer: 42"),
                    ]
                ),
                judge=judge,
            )
            for n in range(count)
        )
        batch = chalk.submit_batch(jobs)
        results = batch.results(timeout=600)
        elapsed = time.perf_counter() - started
    assert len(results) == count and all(r.score == 1.0 for r in results)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": elapsed, "peak_mb": peak_mb}))


def run_client(url: str, count: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.batch", "--client", url, str(count)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(small: int, large: int) -> tuple[dict[str, float], dict[str, float]]:
    """The small and the large batch, each from its own client process."""
    with redis_server() as url, chalk_workers(url, ["--pool", "threads", "--concurrency", "64"]):
        run_client(url, 20)  # warm-up: the worker is ready
        return run_client(url, small), run_client(url, large)


def figures(smoke: bool = False) -> list[Figure]:
    """Client peak memory of the large batch, and time large / time small."""
    small, large = (100, 1000) if smoke else (1000, 10_000)
    little, big = measure(small, large)
    return [
        Figure(
            name=f"{large}-job batch: client peak memory",
            value=f"{big['peak_mb']:.0f} MB",
            baseline="limit 200 MB",
            ratio=big["peak_mb"] / 200,
            goal="< 1.0",
        ),
        Figure(
            name=f"{large}-job batch time / {small}-job batch time",
            value=f"{big['seconds']:.1f} s",
            baseline=f"{small} jobs {little['seconds']:.2f} s",
            ratio=big["seconds"] / little["seconds"],
            goal=f"<= {1.2 * large / small:g}",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--large", type=int, default=10_000)
    parser.add_argument("--client", nargs=2, metavar=("URL", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        client(args.client[0], int(args.client[1]))
        return
    little, big = measure(args.small, args.large)
    for name, run in ((args.small, little), (args.large, big)):
        print(f"{name} jobs: {run['seconds']:.2f} s, client peak RSS {run['peak_mb']:.0f} MB")
    ratio = big["seconds"] / little["seconds"]
    print(f"time ratio {args.large}/{args.small}: {ratio:.1f} (goal <= 12)")
    print(f"client peak memory: {big['peak_mb']:.0f} MB (goal < 200 MB)")


if __name__ == "__main__":
    main()
