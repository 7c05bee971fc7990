"""One GRPO step's rewards on the embedded queue, called as ``GRPOTrainer`` calls them.

    python -m tasks.code_reward.demo

For each problem a stand-in policy gives a group of four completions: a right
solution, a wrong one, one without a code block, and one that tries to pass
the tests by exiting before they run. The reward function scores the whole
batch in one call with the arguments ``GRPOTrainer`` passes: keyword
``prompts`` and ``completions`` (conversational), ``completion_ids``, the
dataset's other columns (``tests``) with one value per completion, and
``trainer_state``. Scripts run sandboxed, concurrently, in this process. It
prints each reward and the group-relative advantage GRPO derives from it:
``(reward - group mean) / (group std + 1e-4)``.
"""

from __future__ import annotations

import statistics
import sys
from types import SimpleNamespace
from typing import Any

from tasks.code_reward.problems import rows
from tasks.code_reward.reward import code_reward

_ANSWERS = {
    "add": (
        "def add(a, b):\n    return a + b",
        "def add(a, b):\n    return a - b",
    ),
    "is_palindrome": (
        "def is_palindrome(text):\n    text = text.lower()\n    return text == text[::-1]",
        "def is_palindrome(text):\n    return text == text[::-1]",
    ),
    "fizzbuzz": (
        "def fizzbuzz(n):\n    if n % 15 == 0:\n        return 'FizzBuzz'\n"
        "    if n % 3 == 0:\n        return 'Fizz'\n    if n % 5 == 0:\n        return 'Buzz'\n"
        "    return str(n)",
        "def fizzbuzz(n):\n    return 'Fizz' if n % 3 == 0 else str(n)",
    ),
}
KINDS = ("right", "wrong", "no code block", "exits early")
GROUP = len(KINDS)


def policy(function: str) -> list[str]:
    """A group of completions for the problem asking for ``function``, one of each kind."""
    right, wrong = _ANSWERS[function]
    return [
        f"Here it is:\n\n```python\n{right}\n```",
        f"```python\n{wrong}\n```",
        f"I would write a function called {function} that does what was asked.",
        "```python\nimport os\nos._exit(0)\n```",
    ]


def grpo_batch() -> dict[str, Any]:
    """The keyword arguments GRPOTrainer passes to reward functions for one step."""
    prompts: list[Any] = []
    completions: list[Any] = []
    tests: list[str] = []
    for row, function in zip(rows(), _ANSWERS, strict=True):
        for text in policy(function):
            prompts.append(row["prompt"])
            completions.append([{"role": "assistant", "content": text}])
            tests.append(row["tests"])
    return {
        "prompts": prompts,
        "completions": completions,
        "completion_ids": [list(c[0]["content"].encode())[:32] for c in completions],
        "tests": tests,
        "trainer_state": SimpleNamespace(global_step=1),
    }


def advantages(rewards: list[float]) -> list[float]:
    """GRPO's group-relative advantages, group by group."""
    result: list[float] = []
    for start in range(0, len(rewards), GROUP):
        group = rewards[start : start + GROUP]
        mean, std = statistics.fmean(group), statistics.stdev(group)
        result.extend((r - mean) / (std + 1e-4) for r in group)
    return result


def main() -> int:
    reward = code_reward()
    scores = reward(**grpo_batch())
    if any(score is None for score in scores):
        failed = [r.error for r in reward.last_results if r.error]
        print(f"some completions could not be scored: {failed[0]}", file=sys.stderr)
        return 1
    rewards = [float(score) for score in scores if score is not None]
    print(f"{'problem':15} {'completion':15} {'reward':>6} {'advantage':>9}")
    for index, (reward_value, advantage) in enumerate(
        zip(rewards, advantages(rewards), strict=True)
    ):
        function = list(_ANSWERS)[index // GROUP]
        print(f"{function:15} {KINDS[index % GROUP]:15} {reward_value:6.2f} {advantage:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
