"""The TRL reward function of this task: each completion's code, run against its row's tests.

The completion's last Python code block becomes ``solution.py`` and the row's
``tests`` column ``tests.py``; ``run_tests``, sandboxed by the worker, scores
the fraction of tests passed.
"""

from __future__ import annotations

from typing import Any

from chalk_client.integrations.submissions import CodeBlockSubmission
from chalk_client.integrations.trl import RewardFunction, reward_function
from chalk_client.judges import ExecutableJudge

JUDGE = ExecutableJudge(
    ["{python}", "-m", "tasks.code_reward.run_tests", "{submission_dir}", "score.json"],
    timeout_s=120,
)
"""Runs the tests; 10 s per test (``run_tests.TEST_TIMEOUT_S``), 2 minutes in all."""

SUBMISSION = CodeBlockSubmission("solution.py", files_from_columns={"tests.py": "tests"})
"""The code block as ``solution.py``, the row's ``tests`` column as ``tests.py``."""


def code_reward(**options: Any) -> RewardFunction:
    """The reward function; ``options`` go to ``reward_function`` (``redis_url=`` for a cluster)."""
    return reward_function(JUDGE, submission=SUBMISSION, name="code_reward", **options)
