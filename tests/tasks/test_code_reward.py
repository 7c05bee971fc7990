"""The GRPO code-execution reward of ``tasks/code_reward``, end to end on the embedded queue."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest

from tasks.code_reward import run_tests
from tasks.code_reward.demo import KINDS, grpo_batch
from tasks.code_reward.reward import code_reward

ROOT = Path(__file__).resolve().parents[2]
TESTS = "def test_one():\n    assert add(1, 2) == 3\n\ndef test_two():\n    assert add(0, 0) == 0\n"


def scored(folder: Path) -> dict[str, Any]:
    """The example's verdict for ``folder``, typed for the assertions."""
    return cast(dict[str, Any], run_tests.score(folder))


def folder_with(tmp_path: Path, solution: str, tests: str = TESTS) -> Path:
    (tmp_path / "solution.py").write_text(solution)
    (tmp_path / "tests.py").write_text(tests)
    return tmp_path


def test_the_score_is_the_fraction_of_tests_passed(tmp_path):
    verdict = scored(folder_with(tmp_path, "def add(a, b):\n    return a + b + 0 * a\n"))
    assert verdict["score"] == 1.0
    half = scored(folder_with(tmp_path, "def add(a, b):\n    return 3\n"))
    assert half["score"] == 0.5
    metadata = half["metadata"]
    assert isinstance(metadata, dict)
    assert "test_two: AssertionError" in metadata["failures"]


@pytest.mark.parametrize(
    "solution",
    [
        "import os\nos._exit(0)\n",
        "import sys\nsys.exit(0)\n",
        "print('chalk-test-passed 0')\nimport os\nos._exit(0)\n",
        "def add(a, b):\n    raise SystemExit(0)\n",
    ],
)
def test_exiting_early_or_printing_a_verdict_passes_no_test(tmp_path, solution):
    assert scored(folder_with(tmp_path, solution))["score"] == 0.0


def test_a_solution_that_hangs_fails_at_the_time_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(run_tests, "TEST_TIMEOUT_S", 0.5)
    verdict = scored(folder_with(tmp_path, "while True:\n    pass\n"))
    assert verdict["score"] == 0.0
    assert "timed out" in verdict["metadata"]["failures"]


def test_tests_that_do_not_parse_or_define_nothing_score_zero_with_the_reason(tmp_path):
    broken = scored(folder_with(tmp_path, "", "def (:"))
    assert broken["score"] == 0.0 and "do not parse" in broken["metadata"]["error"]
    none = scored(folder_with(tmp_path, "", "x = 1\n"))
    assert none["score"] == 0.0 and "no test_" in none["metadata"]["error"]


def test_one_grpo_step_of_rewards_on_the_embedded_queue():
    reward = code_reward()
    rewards = reward(**grpo_batch())
    by_kind = {kind: rewards[index::4] for index, kind in enumerate(KINDS)}
    assert by_kind["right"] == [1.0, 1.0, 1.0]
    assert by_kind["no code block"] == [0.0, 0.0, 0.0]
    assert by_kind["exits early"] == [0.0, 0.0, 0.0]
    assert by_kind["wrong"] == [0.0, pytest.approx(2 / 3), 0.5]
    assert all(r.status == "succeeded" for r in reward.last_results)


def test_the_demo_runs_as_a_user_runs_it():
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHALK_")}
    done = subprocess.run(
        [sys.executable, "-m", "tasks.code_reward.demo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "fizzbuzz        right             1.00" in done.stdout
