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


@pytest.mark.slow
def test_the_whole_suite_runs_in_smoke_mode():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--smoke",
            "--only",
            "throughput,latency,sandbox,codegen,inprocess,batch,submission",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
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
        assert name in done.stdout, done.stdout
