"""The benchmark suite in smoke mode: every benchmark still runs and reports its figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.suite import Figure, table

ROOT = Path(__file__).resolve().parents[2]


def test_figures_pass_or_fail_by_their_goal():
    assert Figure("x", "1", "2", 0.5, "<= 1.5").passed
    assert not Figure("x", "1", "2", 0.9, ">= 1.0").passed
    assert Figure("x", "1", "2", 0.99, "< 1.0").passed
    text = table([Figure("throughput", "500 jobs/s", "raw 450 jobs/s", 1.11, ">= 1.0")])
    assert "throughput" in text and "1.11" in text and "pass" in text


HALVES = (
    "codegen,submission,http_api",
    "throughput,latency,sandbox,inprocess,llm_cpu,programs,sharing,batch",
)
"""The benchmarks the smoke test runs, in two processes at once (they mostly wait)."""


@pytest.mark.slow
def test_the_whole_suite_runs_in_smoke_mode():
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "bench", "--smoke", "--only", half],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for half in HALVES
    ]
    stdout = ""
    for run in runs:
        out, err = run.communicate(timeout=600)
        assert run.returncode == 0, out + err[-4000:]
        stdout += out
    for name in (
        "batch throughput",
        "round trip",
        "sandboxed trivial judge",
        "client peak memory",
        "unpack time",
        "worker peak RSS growth",
        "in-process 20 threads x score_job",
        "in-process score_jobs",
        "CPU per rubric call",
        "LLMPool.complete vs the bare openai client",
        "codegen",
        "tests judge, 8 languages",
        "/run_code, 32 clients",
        "batch behind a",
        "batches at once",
    ):
        assert name in stdout, stdout


def test_sandbox_stages_split_each_run_at_its_command_s_events():
    from bench.sandbox_stages import report, trace_events

    # A cold job from t=0 to t=30 ms and a bare spawn from 30 to 52 ms (perf's
    # seconds, CLOCK_MONOTONIC), each with its command's exec, exit and zombie switch.
    trace = "\n".join(
        [
            "     0.002000: sched:sched_process_exec: filename=/v/bin/python pid=11 old_pid=11",
            "     0.024000: sched:sched_process_exit: comm=python pid=11 prio=120",
            "     0.025000:   sched:sched_switch: prev_comm=python prev_pid=11 prev_prio=120"
            " prev_state=Z ==> next_comm=swapper/0 next_pid=0 next_prio=120",
            "     0.030500: sched:sched_process_exec: filename=/v/bin/python pid=12 old_pid=12",
            "     0.051000: sched:sched_process_exit: comm=python pid=12 prio=120",
            "     0.051500:   sched:sched_switch: prev_comm=python prev_pid=12 prev_prio=120"
            " prev_state=Z ==> next_comm=swapper/1 next_pid=0 next_prio=120",
            "     0.040000: sched:sched_process_exec: filename=/usr/bin/true pid=13 old_pid=13",
        ]
    )
    text = report([[0, 30_000_000, 52_000_000]], trace_events(trace))
    assert "1 runs" in text
    rows = {line[:26].strip(): line.split()[-2:] for line in text.splitlines()[1:5]}
    assert rows["start -> exec"] == ["2.000", "0.500"]
    assert rows["life"] == ["22.000", "20.500"]
    assert rows["exit -> zombie"] == ["1.000", "0.500"]
    assert rows["zombie -> result"] == ["5.000", "0.500"]
    over, life = text.rstrip().splitlines()[-2:]
    assert over.endswith(" 6.500")  # (2 + 1 + 5) - (0.5 + 0.5 + 0.5)
    assert life.startswith("  the life") and life.endswith(" 1.500")  # 22 - 20.5
