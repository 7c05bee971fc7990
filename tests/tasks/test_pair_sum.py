"""``tasks/pair_sum``: the tests judge's example in the docs, scored as a new user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from chalk_client import JobResult
from chalk_client.scoring import Verdict, ZeroCause
from tasks.pair_sum.checker import verdict

ROOT = Path(__file__).resolve().parents[2]


def test_the_checker_takes_any_right_pair_and_says_why_not() -> None:
    given, none = "4 6\n1 5 3 3\n", "3 10\n1 2 3\n"
    assert verdict(given, "1 2\n", "3 4\n") == (0, "a right pair")
    assert verdict(given, "3 4", "1 2") == (0, "a right pair")
    assert verdict(given, "1 3", "1 2")[0] == 1
    assert verdict(given, "-1", "1 2") == (1, "said -1, but a pair exists")
    assert verdict(none, "-1", "-1") == (0, "no pair, right")
    assert verdict(given, "two", "1 2")[0] == 2
    assert verdict(given, "1 2 3", "1 2")[0] == 2


@pytest.mark.slow
def test_chalk_score_grades_the_example_answers_in_four_languages(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    rollouts = "tasks/pair_sum/rollouts.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "chalk_client.cli", "score", rollouts, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    results = {
        r.job_id: r for r in map(JobResult.model_validate_json, out.read_text().splitlines())
    }
    for right in ("cpp-right", "java-right", "python-right"):
        assert results[right].score == 1.0, results[right].scoring
    slow = results["python-quadratic"].scoring
    assert slow is not None and slow.tests is not None
    assert slow.tests[-1].verdict is Verdict.TIME_LIMIT  # 20,000 numbers, O(n^2)
    gives_up = results["go-gives-up"].scoring
    assert gives_up is not None and gives_up.tests is not None
    assert Verdict.WRONG_ANSWER in {t.verdict for t in gives_up.tests}
    assert results["c-does-not-compile"].cause is ZeroCause.COMPILE_ERROR
