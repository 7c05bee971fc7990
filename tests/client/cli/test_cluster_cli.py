"""``chalk score`` on a cluster, and ``chalk status``, driven as a user would from a shell."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from chalk_client import JobResult

ROOT = Path(__file__).resolve().parents[3]
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


def results_in(path: Path) -> list[JobResult]:
    return [JobResult.model_validate_json(line) for line in path.read_text().splitlines()]


def test_grader_errors_on_the_cluster_then_rescored_and_reported(
    redis_url, shared_worker, tmp_path
):
    typo = {
        "type": "executable",
        "command": ["{python}", "-m", "tasks.example_task.scoring_scrpt", "answer.txt"],
    }
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text(
        json.dumps({"id": "typo-1", "judge": typo})
        + "\n"
        + json.dumps({"id": "fine-1", "judge": {"type": "always_pass"}})
        + "\n"
    )
    out = tmp_path / "results.jsonl"
    run = chalk(redis_url, "score", str(rollouts), "--out", str(out), "--strict")
    assert run.returncode == 1, run.stderr  # --strict: a grader error is an error
    assert "Zeros by cause: 1 grader_error" in run.stderr
    assert "First, typo-1: the script exited with status 1" in run.stderr
    batch_id = re.search(r"as batch (\S+)", run.stderr).group(1)

    job = chalk(redis_url, "status", "typo-1")
    assert "score: 0.0 (grader_error)" in job.stdout
    assert "GRADER ERROR: the script exited with status 1" in job.stdout
    batch = chalk(redis_url, "status", batch_id)
    assert "zeros by cause: 1 grader_error" in batch.stdout
    assert "WARNING: 1 grader error(s)" in batch.stdout and "typo-1" in batch.stdout

    report = chalk(redis_url, "report", "--batch", batch_id, "--out", str(tmp_path / "b.html"))
    assert report.returncode == 0, report.stderr
    html = (tmp_path / "b.html").read_text()
    assert f"batch {batch_id}" in html and "typo-1" in html and "grader-warning" in html

    # The typo fixed under the same id: a re-run skips it, --rescore scores it again.
    rollouts.write_text(
        json.dumps({"id": "typo-1", "judge": {"type": "always_pass"}})
        + "\n"
        + json.dumps({"id": "fine-1", "judge": {"type": "always_pass"}})
        + "\n"
    )
    again = chalk(redis_url, "score", str(rollouts), "--out", str(out))
    assert "Skipped 2 jobs already scored" in again.stderr and len(results_in(out)) == 2
    redo = chalk(
        redis_url, "score", str(rollouts), "--out", str(out), "--rescore", "--only", "typo-1"
    )
    assert redo.returncode == 0, redo.stderr
    last = results_in(out)[-1]
    assert last.job_id == "typo-1" and last.score == 1.0 and last.cause is None
    assert "(all runs): 2 jobs, 2 succeeded, 0 failed; mean score 1.0000" in redo.stderr
    job = chalk(redis_url, "status", "typo-1")
    assert "score: 1.0" in job.stdout and "GRADER ERROR" not in job.stdout


def test_no_live_worker_is_said_at_once_then_the_worker_is_greeted(
    own_redis_url, start_worker, tmp_path
):
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text('{"id": "lonely-1", "judge": {"type": "always_pass"}}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHALK_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "chalk_client.cli", "score", str(rollouts)],
        env={**env, "CHALK_REDIS_URL": own_redis_url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        seen = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            seen.append(line)
            if "no live worker" in line:
                break
        said = "".join(seen)
        assert "no live worker takes jobs from queue 'chalk'" in said, said
        assert "`chalk worker`" in said and "the jobs wait in the queue" in said
        start_worker(own_redis_url)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert JobResult.model_validate_json(out).score == 1.0
