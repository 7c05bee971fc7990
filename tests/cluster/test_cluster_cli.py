"""``chalk score`` on a cluster, and ``chalk status``, driven as a user would from a shell."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from chalk_client import JobResult

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "tasks" / "example_task"


def chalk(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHALK_")}
    env["CHALK_REDIS_URL"] = redis_url
    return subprocess.run(
        [sys.executable, "-m", "chalk_client.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_chalk_score_on_the_cluster_streams_resumes_and_reports(redis_url, shared_worker, tmp_path):
    out = tmp_path / "results.jsonl"
    rollouts, judge = str(EXAMPLE / "rollouts.jsonl"), str(EXAMPLE / "judge.json")
    run = chalk(redis_url, "score", rollouts, "--judge", judge, "--out", str(out))
    assert run.returncode == 0, run.stderr
    results = {
        r.job_id: r for r in map(JobResult.model_validate_json, out.read_text().splitlines())
    }
    assert {job_id: r.score for job_id, r in results.items()} == {
        "rollout-001": 1.0,
        "rollout-002": 0.0,
        "rollout-003": 0.0,
        "rollout-004": 1.0,
    }
    assert all("@" in (r.worker or "") for r in results.values())  # scored by the worker
    assert "Scored 4 jobs: 4 succeeded, 0 failed." in run.stderr
    assert "Mean score: 0.5000" in run.stderr
    batch_id = re.search(r"as batch (\S+)", run.stderr).group(1)

    again = chalk(redis_url, "score", rollouts, "--judge", judge, "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert "Skipped 4 jobs already scored" in again.stderr
    assert len(out.read_text().splitlines()) == 4

    status = chalk(redis_url, "status", batch_id)
    assert status.returncode == 0, status.stderr
    assert f"batch {batch_id}: finished, 4/4 done" in status.stdout
    assert "succeeded 4, failed 0" in status.stdout and "mean score: 0.5000" in status.stdout

    job = chalk(redis_url, "status", "rollout-001")
    assert "job rollout-001: succeeded" in job.stdout and "score: 1.0" in job.stdout

    overview = chalk(redis_url, "status")
    assert "running jobs: 0" in overview.stdout and batch_id in overview.stdout

    unknown = chalk(redis_url, "status", "no-such-thing")
    assert unknown.returncode == 2 and "no job 'no-such-thing'" in unknown.stderr


def test_concurrency_on_the_cluster_is_explained_not_silently_ignored(
    redis_url, shared_worker, tmp_path
):
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text('{"id": "conc-1", "judge": {"type": "always_pass"}}\n')
    run = chalk(redis_url, "score", str(rollouts), "--concurrency", "4")
    assert run.returncode == 0, run.stderr
    assert "on the cluster each worker sets its own (chalk worker --concurrency N)" in run.stderr
    assert JobResult.model_validate_json(run.stdout).score == 1.0
