"""``chalk score`` on the embedded queue, driven as a user would from a shell."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from chalk_client import JobResult, JobStatus, ScoringJob
from chalk_client.judges import AlwaysPassJudge, CustomJudge, RegexJudge

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "tasks" / "example_task"


def chalk(*args: str, **kwargs) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHALK_")}
    return subprocess.run(
        [sys.executable, "-m", "chalk_client.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        **kwargs,
    )


def read_results(path: Path) -> dict[str, JobResult]:
    results = [JobResult.model_validate_json(line) for line in path.read_text().splitlines()]
    return {result.job_id: result for result in results}


def write_jobs(path: Path, jobs: list[ScoringJob | dict]) -> Path:
    lines = [j.model_dump_json() if isinstance(j, ScoringJob) else json.dumps(j) for j in jobs]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_scores_the_example_rollouts(tmp_path):
    out = tmp_path / "results.jsonl"
    run = chalk(
        "score",
        str(EXAMPLE / "rollouts.jsonl"),
        "--judge",
        str(EXAMPLE / "judge.json"),
        "--out",
        str(out),
    )
    assert run.returncode == 0, run.stderr
    results = read_results(out)
    assert {job_id: r.score for job_id, r in results.items()} == {
        "rollout-001": 1.0,
        "rollout-002": 0.0,
        "rollout-003": 0.0,  # never wrote answer.txt: the script says so, the step scores 0
        "rollout-004": 1.0,
    }
    assert all(r.status is JobStatus.SUCCEEDED for r in results.values())
    assert len(results["rollout-004"].steps) == 2
    assert results["rollout-001"].metadata["policy"] == "baseline"
    assert "Scored 4 jobs: 4 succeeded, 0 failed." in run.stderr
    assert "Mean score: 0.5000" in run.stderr
    assert "Zeros by cause: 2 script_zero" in run.stderr and "WARNING" not in run.stderr


def test_a_typo_in_the_judge_is_told_apart_from_student_zeros(tmp_path):
    judge = json.loads((EXAMPLE / "judge.json").read_text())
    judge["command"][2] = "tasks.example_task.scoring_scrpt"  # the typo
    typo = tmp_path / "judge.json"
    typo.write_text(json.dumps(judge))
    rollouts = EXAMPLE / "rollouts.jsonl"
    out = tmp_path / "results.jsonl"
    run = chalk("score", str(rollouts), "--judge", str(typo), "--out", str(out))
    # The three lines that take --judge: the reference's verdict stands (succeeded, score 0,
    # the reason in the metadata) ...
    results = read_results(out)
    typoed = [results[f"rollout-00{n}"] for n in (1, 2, 3)]
    assert all(r.status is JobStatus.SUCCEEDED and r.score == 0 for r in typoed)
    assert all("exited with status 1" in r.scoring.metadata["error"] for r in typoed)
    # ... but each zero carries its cause, and the summary warns with the first message.
    assert all(r.cause == "grader_error" and r.grader_error for r in typoed)
    assert results["rollout-004"].score == 1 and results["rollout-004"].cause is None
    assert run.returncode == 0
    assert "Zeros by cause: 3 grader_error" in run.stderr
    warnings = [line for line in run.stderr.splitlines() if "WARNING: " in line]
    assert warnings and "because the grader failed" in warnings[-1]
    assert "First, rollout-00" in warnings[-1] and "exited with status 1" in warnings[-1]
    # At once too, not only in the summary: the first warning comes before the summary.
    assert run.stderr.index("WARNING") < run.stderr.index("Scored 4 jobs")
    # --strict makes it an error (the jobs are scored again under another id: a new judge).
    strict = chalk("score", str(rollouts), "--judge", str(typo), "--rescore", "--strict")
    assert strict.returncode == 1 and "3 grader_error" in strict.stderr
    fine = chalk("score", str(rollouts), "--judge", str(EXAMPLE / "judge.json"), "--strict")
    assert fine.returncode == 0, fine.stderr


def test_one_job_is_one_job(tmp_path):
    rollouts = write_jobs(tmp_path / "r.jsonl", [ScoringJob(id="only", judge=AlwaysPassJudge())])
    run = chalk("score", str(rollouts))
    assert "Scored 1 job: 1 succeeded, 0 failed." in run.stderr, run.stderr


def test_chalk_version():
    run = chalk("--version")
    assert run.returncode == 0
    assert re.fullmatch(r"chalk \d+\.\d+\.\d+\S*\n", run.stdout), run.stdout


def test_rerun_skips_scored_ids_and_retries_failures(tmp_path):
    rollouts = write_jobs(
        tmp_path / "r.jsonl",
        [
            ScoringJob(id="ok", judge=AlwaysPassJudge()),
            ScoringJob(id="broken", judge=CustomJudge("not_registered_anywhere")),
            {
                "transcript": {"messages": [{"role": "assistant", "content": "hi"}]},
                "judge": {"type": "regex", "patterns": ["hi"]},
            },
        ],
    )
    out = tmp_path / "out.jsonl"
    first = chalk("score", str(rollouts), "--out", str(out))
    assert first.returncode == 1  # one job failed
    assert "failed broken" in first.stderr and "not_registered_anywhere" in first.stderr
    assert len(out.read_text().splitlines()) == 3
    with out.open("a") as handle:
        handle.write('{"job_id": "torn li')  # an interrupted run leaves half a line
    second = chalk("score", str(rollouts), "--out", str(out))
    assert "Skipped 2 jobs already scored" in second.stderr
    assert "Scored 1 job: 0 succeeded, 1 failed." in second.stderr  # only the failed one again
    # ... and the totals of the whole output file, earlier runs included:
    assert "(all runs): 3 jobs, 2 succeeded, 1 failed; mean score 1.0000" in second.stderr
    lines = out.read_text().splitlines()
    # Only the torn line went; the earlier failure stays, followed by the new result.
    assert [JobResult.model_validate_json(x).job_id for x in lines][-1] == "broken"
    assert len(lines) == 4 and len({JobResult.model_validate_json(x).job_id for x in lines}) == 3


def test_lines_without_judge_take_the_judge_file(tmp_path):
    rollouts = write_jobs(
        tmp_path / "r.jsonl",
        [{"id": "a", "transcript": {"messages": [{"role": "assistant", "content": "42"}]}}],
    )
    judge = tmp_path / "judge.json"
    judge.write_text(RegexJudge([r"\b42\b"]).model_dump_json())
    run = chalk("score", str(rollouts), "--judge", str(judge))
    assert run.returncode == 0, run.stderr
    (result,) = [JobResult.model_validate_json(line) for line in run.stdout.splitlines()]
    assert result.job_id == "a" and result.score == 1.0


def test_invalid_lines_are_reported_and_nothing_is_scored(tmp_path):
    rollouts = tmp_path / "r.jsonl"
    rollouts.write_text(
        ScoringJob(id="good", judge=AlwaysPassJudge()).model_dump_json()
        + "\n{not json\n"
        + json.dumps({"id": "nojudge"})
        + "\n"
    )
    out = tmp_path / "out.jsonl"
    run = chalk("score", str(rollouts), "--out", str(out))
    assert run.returncode == 2
    assert f"{rollouts}:2: invalid job" in run.stderr and f"{rollouts}:3: invalid job" in run.stderr
    # A line without a judge is told about --judge.
    assert "--judge JUDGE.json" in run.stderr.splitlines()[1]
    assert not out.exists() or out.read_text() == ""
    run = chalk("score", str(rollouts), "--out", str(out), "--skip-invalid")
    assert run.returncode == 0, run.stderr
    assert "Skipped 2 invalid line(s)" in run.stderr
    # The skipped lines leave a trace in --out: a failed result each, saying why.
    results = read_results(out)
    assert results["good"].status is JobStatus.SUCCEEDED
    assert results["nojudge"].status is JobStatus.FAILED
    assert "line 3 of" in results["nojudge"].error and "--judge" in results["nojudge"].error
    (unreadable,) = [r for job_id, r in results.items() if job_id.startswith("sha256-")]
    assert "line 2 of" in unreadable.error and "not valid JSON" in unreadable.error
    lines = out.read_text().splitlines()
    # Run again: the traces are there already, nothing is added.
    run = chalk("score", str(rollouts), "--out", str(out), "--skip-invalid")
    assert run.returncode == 0 and out.read_text().splitlines() == lines


def test_missing_files_are_clear_errors(tmp_path):
    run = chalk("score", str(tmp_path / "absent.jsonl"))
    assert run.returncode == 2 and "no rollouts file" in run.stderr
    rollouts = write_jobs(tmp_path / "r.jsonl", [{"id": "a"}])
    run = chalk("score", str(rollouts), "--judge", str(tmp_path / "absent.json"))
    assert run.returncode == 2 and "could not read the judge file" in run.stderr


def test_chalk_worker_defaults_give_way_to_celery_flags():
    from chalk_client.cli.cluster import worker_argv

    default = worker_argv([])
    assert default[default.index("--pool") + 1] == "threads"
    assert default[default.index("--concurrency") + 1] == "64"
    prefork = worker_argv(["--pool", "prefork"])
    assert prefork.count("--pool") == 1 and prefork[-1] == "prefork"
    assert "--concurrency" not in prefork  # Celery's own default for that pool
    fewer = worker_argv(["-c", "8", "-l", "debug"])
    assert "64" not in fewer and fewer.count("--loglevel") == 0 and fewer[-2:] == ["-l", "debug"]


def test_worker_and_flower_help_need_no_cluster_and_say_what_chalk_adds():
    worker = chalk("worker", "--help")
    assert worker.returncode == 0, worker.stderr
    assert worker.stdout.startswith("chalk worker: Celery's worker, for Chalk's app")
    assert "--pool threads, --concurrency 64" in worker.stdout
    assert "scripts never run as root" in worker.stdout
    assert "Celery's own help follows." in worker.stdout and "--concurrency" in worker.stdout
    assert "-n, --hostname" in worker.stdout  # Celery's own help, after Chalk's words
    flower = chalk("flower", "--help")
    assert flower.returncode == 0, flower.stderr
    assert "--purge_offline_workers=600" in flower.stdout and "--port 5555" in flower.stdout
    assert "--basic-auth" in flower.stdout and "--max-tasks" in flower.stdout  # Flower's own


def test_flower_takes_its_options_with_a_space_or_an_equals_sign():
    from chalk_client.cli.celery_args import flower_args

    assert flower_args(
        ["--port", "5555", "--address=127.0.0.1", "--debug", "--url_prefix", "f"]
    ) == [
        "--port=5555",
        "--address=127.0.0.1",
        "--debug",
        "--url_prefix=f",
    ]
    for args, message in (
        (["--prot", "5555"], "--prot is not a Flower option; see chalk flower --help"),
        (["--port"], "--port needs a value, e.g. --port=VALUE"),
        (["5555"], "'5555' is not one"),
    ):
        run = chalk("flower", *args)
        assert run.returncode == 2 and message in run.stderr, run.stderr
        assert "Traceback" not in run.stderr
