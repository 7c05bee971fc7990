"""A sandboxed trivial Python judge against a bare ``python -c pass`` spawn.

Both are timed in the same run, interleaved, so machine noise hits both alike.
The judge goes through the executable evaluator as a worker runs it: slot,
scratch tmpfs, cgroups, bubblewrap, setpriv, the script, reading its output,
killing leftovers, cleaning up. Goal: ratio <= 2.0.

    python -m bench.sandbox [--runs 40]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.suite import Figure
from chalk_client import ChalkSettings, JobStatus, ScoringJob
from chalk_client.judges import ExecutableJudge
from chalk_worker import score_job_async
from chalk_worker.sandbox import detect_layers

WRITE = "import sys; open(sys.argv[1], 'w').write('{\"score\": 1, \"metadata\": {}}')"


def bare_spawn() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - started


async def sandboxed_judge(job: ScoringJob, settings: ChalkSettings) -> float:
    started = time.perf_counter()
    result = await score_job_async(job, settings=settings)
    elapsed = time.perf_counter() - started
    if result.status is not JobStatus.SUCCEEDED or result.score != 1.0:
        raise SystemExit(f"the sandboxed judge did not score 1: {result}")
    return elapsed


async def measure(runs: int, quiet: bool = False) -> tuple[list[float], list[float]]:
    """Seconds of each sandboxed judge and of each bare spawn, interleaved."""
    settings = ChalkSettings(work_dir=tempfile.gettempdir())
    job = ScoringJob(judge=ExecutableJudge(["{python}", "-c", WRITE, "out.json"]))
    layers = detect_layers(settings.sandbox_tune_cgroups)
    if not quiet:
        print("sandbox layers on:", ", ".join(layers.available))
        if layers.missing:
            print("sandbox layers off:", ", ".join(layers.missing))
    for _ in range(3):  # warm up: the probe, slot cgroups, page cache
        await sandboxed_judge(job, settings)
        bare_spawn()
    judge_times, bare_times = [], []
    for _ in range(runs):
        judge_times.append(await sandboxed_judge(job, settings))
        bare_times.append(bare_spawn())
    return judge_times, bare_times


def figures(smoke: bool = False) -> list[Figure]:
    """The suite's figure: a sandboxed trivial Python judge over ``python -c pass`` (<= 2.0)."""
    judge_times, bare_times = asyncio.run(measure(5 if smoke else 40, quiet=True))
    layers = detect_layers()
    judge_ms = statistics.median(judge_times) * 1000
    bare_ms = statistics.median(bare_times) * 1000
    return [
        Figure(
            name=f"sandboxed trivial judge ({len(layers.available)}/7 layers on)",
            value=f"{judge_ms:.1f} ms",
            baseline=f"python -c pass {bare_ms:.1f} ms",
            ratio=judge_ms / bare_ms,
            goal="<= 2.0",
        )
    ]


async def main(runs: int) -> float:
    judge_times, bare_times = await measure(runs)
    judge_ms = statistics.median(judge_times) * 1000
    bare_ms = statistics.median(bare_times) * 1000
    ratio = judge_ms / bare_ms
    print(f"sandboxed trivial judge: median {judge_ms:.1f} ms over {runs} runs")
    print(f"bare python -c pass:     median {bare_ms:.1f} ms over {runs} runs")
    print(f"ratio: {ratio:.2f} (goal <= 2.0)")
    return ratio


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    arguments = parser.parse_args()
    Path(tempfile.gettempdir()).mkdir(exist_ok=True)
    asyncio.run(main(arguments.runs))
