"""A sandboxed trivial Python judge against the same script spawned bare.

The script writes its score file, as a scoring script does; the baseline runs
that very command with ``subprocess`` (its file on a tmpfs too where there is
one, as a sandboxed script's scratch space is). All are timed in the same run,
interleaved, so machine noise hits them alike.
The judge goes through the executable evaluator as a worker runs it: slot,
scratch tmpfs, cgroups, namespaces, the slot's user, the script, reading its
output, killing leftovers, cleaning up. Two judges: cold (a new interpreter,
``CHALK_WARM_PYTHON=false``; goal: at most 1.2x the bare spawn) and warm (the
interpreter forked from a fork server's; goal: at most half the bare spawn).

    python -m bench.sandbox [--runs 80]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
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


def bare_spawn(output: str) -> float:
    """Seconds to run the judge's script without a sandbox, writing ``output``."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", WRITE, output], check=True)
    return time.perf_counter() - started


def _bare_output() -> str:
    """Where the bare script writes: in memory where the machine has ``/dev/shm``."""
    shm = Path("/dev/shm")
    folder = tempfile.mkdtemp(dir=shm if shm.is_dir() else None)
    return str(Path(folder) / "out.json")


async def sandboxed_judge(job: ScoringJob, settings: ChalkSettings) -> float:
    started = time.perf_counter()
    result = await score_job_async(job, settings=settings)
    elapsed = time.perf_counter() - started
    if result.status is not JobStatus.SUCCEEDED or result.score != 1.0:
        raise SystemExit(f"the sandboxed judge did not score 1: {result}")
    return elapsed


async def measure(runs: int, quiet: bool = False) -> dict[str, list[float]]:
    """Seconds of each sandboxed judge (cold, warm) and of each bare spawn, interleaved."""
    work_dir = tempfile.gettempdir()
    cold = ChalkSettings(work_dir=work_dir, warm_python=False)
    warm = ChalkSettings(work_dir=work_dir, warm_python=True)
    job = ScoringJob(judge=ExecutableJudge(["{python}", "-c", WRITE, "out.json"]))
    layers = detect_layers(cold.sandbox_tune_cgroups)
    if not quiet:
        print("sandbox layers on:", ", ".join(layers.available))
        if layers.missing:
            print("sandbox layers off:", ", ".join(layers.missing))
    output = _bare_output()
    try:
        for _ in range(3):  # warm up: the probe, fork servers, slot cgroups, page cache
            await sandboxed_judge(job, cold)
            await sandboxed_judge(job, warm)
            bare_spawn(output)
        times: dict[str, list[float]] = {"cold": [], "warm": [], "bare": []}
        for _ in range(runs):
            times["cold"].append(await sandboxed_judge(job, cold))
            times["bare"].append(bare_spawn(output))
            times["warm"].append(await sandboxed_judge(job, warm))
    finally:
        shutil.rmtree(Path(output).parent, ignore_errors=True)
    return times


def figures(smoke: bool = False) -> list[Figure]:
    """The suite's figures: a sandboxed trivial judge, cold and warm, over the bare script."""
    times = asyncio.run(measure(5 if smoke else 80, quiet=True))
    layers = detect_layers(ChalkSettings().sandbox_tune_cgroups)  # the probe the runs used
    ms = {kind: statistics.median(values) * 1000 for kind, values in times.items()}
    baseline = f"the script bare {ms['bare']:.1f} ms"
    on = f"{len(layers.available)}/7 layers on"
    return [
        Figure(
            name=f"sandboxed trivial judge, cold ({on})",
            value=f"{ms['cold']:.1f} ms",
            baseline=baseline,
            ratio=ms["cold"] / ms["bare"],
            goal="<= 1.2",
        ),
        Figure(
            name=f"sandboxed trivial judge, warm ({on})",
            value=f"{ms['warm']:.1f} ms",
            baseline=baseline,
            ratio=ms["warm"] / ms["bare"],
            goal="<= 0.5",
        ),
    ]


async def main(runs: int) -> None:
    times = await measure(runs)
    ms = {kind: statistics.median(values) * 1000 for kind, values in times.items()}
    print(f"sandboxed trivial judge, cold: median {ms['cold']:.1f} ms over {runs} runs")
    print(f"sandboxed trivial judge, warm: median {ms['warm']:.1f} ms over {runs} runs")
    print(f"the same script, bare:         median {ms['bare']:.1f} ms over {runs} runs")
    cold, warm = ms["cold"] / ms["bare"], ms["warm"] / ms["bare"]
    print(f"ratios: cold {cold:.2f} (goal <= 1.2), warm {warm:.2f} (goal <= 0.5)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=80)
    arguments = parser.parse_args()
    Path(tempfile.gettempdir()).mkdir(exist_ok=True)
    asyncio.run(main(arguments.runs))
