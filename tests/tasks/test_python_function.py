"""The python_function task: a scoring script that runs the student's code and cannot be fooled.

Scored through ``score_job``, the worker's own path, in the real sandbox. The
attack: a ``solution.py`` that, when imported, writes the scoring script's
output file with ``"score": 1`` and exits 0. A naive script that imports the
student's module in its own process is fooled by it (shown here, so this test
could not pass by accident); the task's script scores it 0 and says why.
"""

from __future__ import annotations

from pathlib import Path

from chalk_client import JobResult, ScoringJob, Submission
from chalk_client.judges import CustomJudge, ExecutableJudge
from chalk_client.rollouts import DefaultJudge, read_rollouts
from chalk_client.scoring import ZeroCause
from chalk_worker import score_job

TASK = Path(__file__).resolve().parents[2] / "tasks" / "python_function"
SCRIPT = ["{python}", "-m", "tasks.python_function.scoring_script", "{submission}", "score.json"]

RIGHT = """
def fizzbuzz(n):
    return "FizzBuzz" if n % 15 == 0 else "Fizz" if n % 3 == 0 else "Buzz" if n % 5 == 0 else str(n)
"""
WRONG = """
def fizzbuzz(n):
    return "Fizz" if n % 3 == 0 else str(n)
"""
FOREVER = """
def fizzbuzz(n):
    while True:
        pass
"""
WRITES_THE_VERDICT = """
import json, os, sys

def _output_path():
    # The scoring script's last argument is its output file: in this process's
    # arguments (imported by the scoring script), or its parent's, read from /proc.
    found = [[word.encode() for word in sys.argv]]
    for pid in (os.getpid(), os.getppid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                found.append([w for w in cmdline.read().split(b"\\0") if w])
        except OSError:
            continue
    for words in found:
        if words and words[-1].endswith(b".json"):
            return words[-1].decode()
    return None

_path = _output_path()
if _path:
    with open(_path, "w") as out:
        json.dump({"score": 1.0, "metadata": {"fooled": "yes"}}, out)
    os._exit(0)

def fizzbuzz(n):
    return ""
"""
FORKS = """
import os
try:
    _child = os.fork()
except OSError:
    _child = None  # refused
if _child == 0:
    os._exit(0)  # a process that could have outlived the scoring script

def fizzbuzz(n):
    if _child is None:
        return "refused"
    # Right answers only if the fork went through: a score above 0 would mean it did.
    return "FizzBuzz" if n % 15 == 0 else "Fizz" if n % 3 == 0 else "Buzz" if n % 5 == 0 else str(n)
"""
NAIVE = """
import importlib.util, json, sys
solution, output = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("solution", solution)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)  # the student's code, in the scoring script's own process
right = sum(module.fizzbuzz(n) == str(n) for n in (1, 2, 4))
json.dump({"score": right / 3, "metadata": {}}, open(output, "w"))
"""


def grade(code: str | None, command: list[str] = SCRIPT) -> JobResult:
    files = {} if code is None else {"solution.py": code}
    return score_job(
        ScoringJob(
            judge=ExecutableJudge(command),
            submission=Submission.from_files(files),
            submission_paths=["solution.py"],
        )
    )


def test_a_right_solution_scores_1():
    result = grade(RIGHT)
    assert result.score == 1.0, result.scoring
    assert result.scoring.metadata["passed"] == result.scoring.metadata["cases"] == "55"


def test_a_wrong_solution_scores_the_share_it_got_right():
    result = grade(WRONG)
    assert 0 < result.score < 1 and result.scoring.metadata["first_wrong"].startswith("fizzbuzz(")


def test_a_solution_that_never_ends_is_stopped_and_scores_0():
    result = grade(FOREVER)
    assert result.score == 0 and result.cause is ZeroCause.SCRIPT_ZERO
    assert "took more than 10 s" in result.scoring.metadata["problem"]


def test_a_missing_solution_scores_0_without_a_grader_error():
    result = grade(None)
    assert result.score == 0 and result.scoring.metadata["missing"] == "solution.py"
    assert result.cause is ZeroCause.SCRIPT_ZERO


def test_a_solution_that_writes_the_verdict_itself_fools_a_naive_script_not_this_one(script):
    naive = grade(WRITES_THE_VERDICT, ["{python}", script(NAIVE), "{submission}", "score.json"])
    assert naive.score == 1.0 and naive.scoring.metadata["fooled"] == "yes"  # the attack works
    result = grade(WRITES_THE_VERDICT)
    assert result.score == 0.0 and "fooled" not in result.scoring.metadata
    # In the sandbox the child cannot even find the output path (its parent is not
    # dumpable, so /proc, mounted with hidepid, hides it); had it written the file, the
    # verdict says so.
    assert result.scoring.metadata.get("tampered") in (
        None,
        "the solution wrote to the scoring script's output file",
    )


def test_the_solution_cannot_start_a_process_that_outlives_it():
    result = grade(FORKS)
    assert result.score == 0.0, "the student's code could fork"
    assert result.scoring.metadata["passed"] == "0"


def test_the_task_s_custom_judge_lives_in_a_module_not_named_judges():
    job = ScoringJob(
        judge=CustomJudge("defines_function", {"name": "fizzbuzz"}),
        submission=Submission.from_files({"solution.py": RIGHT}),
        submission_paths=["solution.py"],
    )
    assert score_job(job).score == 1.0
    assert (TASK / "checks.py").is_file() and not (TASK / "judges.py").exists()


def test_the_task_s_rollouts_score_as_their_metadata_says():
    jobs = list(read_rollouts(TASK / "rollouts.jsonl", DefaultJudge.from_file(TASK / "judge.json")))
    assert len(jobs) == 4
    for job in jobs:
        assert isinstance(job, ScoringJob), job
        result = score_job(job)
        assert result.score == job.metadata["expected_score"], (job.id, result.steps)
