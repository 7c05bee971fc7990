"""Run every benchmark and print one table: figure, baseline, ratio, goal, pass/fail.

    python -m bench            # the full suite (several minutes)
    python -m bench --smoke    # tiny sizes: checks the suite still runs (the tests do this)
    python -m bench --only sandbox,latency

Each benchmark starts what it needs (its own redis-server on a free port, its
own workers) and cleans up. Ratios are against baselines measured in the same
run, so they hold on a noisy machine better than absolute times.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import subprocess
import sys
import time

from bench.suite import Figure, table

BENCHMARKS = (
    "throughput",
    "latency",
    "sandbox",
    "codegen",
    "programs",
    "rubric",
    "inprocess",
    "llm_cpu",
    "batch",
    "submission",
    "footprint",
    "ceiling",
    "replicas",
    "http_api",
    "sharing",
    "network",
)


def run_one(name: str, smoke: bool) -> list[Figure]:
    """One benchmark in a process of its own (no connection or cache leaks into the next)."""
    argv = [sys.executable, "-m", "bench", "--one", name, *(["--smoke"] if smoke else [])]
    done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"bench.{name} exited with status {done.returncode}")
    return [Figure(**json.loads(line)) for line in done.stdout.splitlines() if line.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check it runs")
    parser.add_argument("--only", help="comma-separated benchmarks: " + ", ".join(BENCHMARKS))
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        module = importlib.import_module(f"bench.{args.one}")
        for figure in module.figures(smoke=args.smoke):
            print(json.dumps(dataclasses.asdict(figure)))
        return 0
    names = args.only.split(",") if args.only else list(BENCHMARKS)
    figures: list[Figure] = []
    broken: list[str] = []
    for name in names:
        started = time.monotonic()
        print(f"running {name} ...", file=sys.stderr, flush=True)
        try:
            figures.extend(run_one(name, args.smoke))
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"  {exc}", file=sys.stderr)
            broken.append(name)
        print(f"  {name}: {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    print(table(figures))
    if broken:
        print(f"benchmarks that did not run: {', '.join(broken)}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
