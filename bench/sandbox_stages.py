"""Where a cold sandboxed judge's time goes beyond its command's own life, stage by stage.

A whole-benchmark ratio moves by several hundredths from one process to the next
on a shared machine, more than most single changes to the cold path; this splits
each run at the kernel's own events, so a change is seen on the stage it touches.
One process alternates cold judges (``bench.sandbox``'s) and bare spawns of the
same script under ``perf record -k CLOCK_MONOTONIC`` (scheduler tracepoints);
each job's wall time is split into: its start to the command's ``exec``, the
command's life (``exec`` to ``exit``), its ``exit`` to its last switch as a
zombie, and from there to the result. Needs root and ``perf``; not in the suite.

    python -m bench.sandbox_stages [--runs 100]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import logging
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STAGES = ("start -> exec", "life", "exit -> zombie", "zombie -> result")
EVENTS = "sched:sched_process_exec,sched:sched_process_exit,sched:sched_switch"
Split = tuple[float, float, float, float]


async def _measure(runs: int, marks_file: Path) -> None:
    """Time the jobs (monotonic ns marks: cold start, cold end = bare start, bare end)."""
    from bench.sandbox import WRITE, _bare_output, bare_spawn
    from chalk_client import ChalkSettings, JobStatus, ScoringJob
    from chalk_client.judges import ExecutableJudge
    from chalk_worker import score_job_async

    logging.disable(logging.CRITICAL)
    settings = ChalkSettings(work_dir=tempfile.gettempdir(), warm_python=False)
    job = ScoringJob(judge=ExecutableJudge(["{python}", "-c", WRITE, "out.json"]))
    output = _bare_output()
    marks = []
    for number in range(runs + 5):  # the first five warm up
        started = time.monotonic_ns()
        result = await score_job_async(job, settings=settings)
        ended = time.monotonic_ns()
        if result.status is not JobStatus.SUCCEEDED or result.score != 1.0:
            raise SystemExit(f"the sandboxed judge did not score 1: {result}")
        bare_spawn(output)
        if number >= 5:
            marks.append((started, ended, time.monotonic_ns()))
    shutil.rmtree(Path(output).parent, ignore_errors=True)
    marks_file.write_text(json.dumps(marks))


def trace_events(trace: str) -> list[tuple[int, str, int]]:
    """``(ns, exec|exit|zombie, pid)`` from ``perf script -F time,event,trace``."""
    found = []
    line_shape = re.compile(r"(\d+\.\d+):\s+sched:sched_(process_exec|process_exit|switch): (.*)")
    for line in trace.splitlines():
        match = line_shape.search(line)
        if match is None:
            continue
        at = round(float(match[1]) * 1e9)
        kind, rest = match[2], match[3]
        if kind == "switch":
            zombie = re.search(r"prev_pid=(\d+) .*prev_state=Z", rest)
            if zombie:
                found.append((at, "zombie", int(zombie[1])))
        elif kind == "process_exit" or "python" in rest:
            pid = re.search(r" pid=(\d+)", rest)
            if pid:
                found.append((at, "exec" if kind == "process_exec" else "exit", int(pid[1])))
    return sorted(found)


def _split(events: list[tuple[int, str, int]], start: int, end: int) -> Split | None:
    """The job from ``start`` to ``end`` split at its longest-lived Python command."""
    times = [event[0] for event in events]
    seen: dict[str, dict[int, int]] = {"exec": {}, "exit": {}, "zombie": {}}
    for at, kind, pid in events[bisect.bisect_left(times, start) : bisect.bisect_right(times, end)]:
        seen[kind].setdefault(pid, at)
    lives = [
        (seen["exit"][pid] - at, at, seen["exit"][pid], seen["zombie"][pid])
        for pid, at in seen["exec"].items()
        if pid in seen["exit"] and pid in seen["zombie"]
    ]
    if not lives:
        return None
    _, executed, exited, zombie = max(lives)
    ms = 1e6
    return (
        (executed - start) / ms,
        (exited - executed) / ms,
        (zombie - exited) / ms,
        (end - zombie) / ms,
    )


def report(marks: list[list[int]], events: list[tuple[int, str, int]]) -> str:
    """Medians of each stage, cold and bare, and of all but the command's life."""
    cold, bare = [], []
    for started, middle, ended in marks:
        one, other = _split(events, started, middle), _split(events, middle, ended)
        if one and other:
            cold.append(one)
            bare.append(other)
    if not cold:
        return "no run could be matched with its command's events"
    lines = [f"{len(cold)} runs, medians in ms      cold     bare"]
    for index, stage in enumerate(STAGES):
        lines.append(
            f"  {stage:<24} {statistics.median(s[index] for s in cold):8.3f} "
            f"{statistics.median(s[index] for s in bare):8.3f}"
        )
    over = [c[0] + c[2] + c[3] - (b[0] + b[2] + b[3]) for c, b in zip(cold, bare, strict=True)]
    lines.append(f"  all but the life, over the bare spawn's, paired {statistics.median(over):.3f}")
    # The command's own life differs too: its environment, its cgroups, its mounts.
    life = [c[1] - b[1] for c, b in zip(cold, bare, strict=True)]
    lines.append(f"  the life, over the bare spawn's, paired       {statistics.median(life):.3f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--marks", type=Path, help=argparse.SUPPRESS)  # the measuring child
    args = parser.parse_args()
    if args.marks is not None:
        asyncio.run(_measure(args.runs, args.marks))
        return
    perf = shutil.which("perf")
    if perf is None:
        raise SystemExit("this needs perf (linux-tools) and root")
    with tempfile.TemporaryDirectory() as folder:
        data, marks = Path(folder) / "perf.data", Path(folder) / "marks.json"
        child = [sys.executable, "-m", "bench.sandbox_stages", "--runs", str(args.runs)]
        record = [perf, "record", "-q", "-k", "CLOCK_MONOTONIC", "-e", EVENTS, "-a"]
        subprocess.run([*record, "-o", str(data), "--", *child, "--marks", str(marks)], check=True)
        trace = subprocess.run(
            [perf, "script", "-i", str(data), "-F", "time,event,trace"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        print(report(json.loads(marks.read_text()), trace_events(trace)))


if __name__ == "__main__":
    main()
