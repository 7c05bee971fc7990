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


HALVES = ("codegen,batch,submission", "throughput,latency,sandbox,inprocess")
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
        "codegen",
    ):
        assert name in stdout, stdout
