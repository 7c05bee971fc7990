"""A few coding problems with tests, in the shape of a TRL dataset (``prompt`` and ``tests``).

Each row's ``prompt`` is a conversation (TRL's conversational format) and its
``tests`` the source of ``tests.py``: top-level ``test_`` functions calling
the function the prompt asks for.
"""

from __future__ import annotations

from typing import Any

SYSTEM = "Answer with one Python code block defining the function asked for, and nothing else."

_PROBLEMS = [
    (
        "Write `add(a, b)` returning the sum of two integers.",
        "def test_small():\n    assert add(1, 2) == 3\n\n"
        "def test_negative():\n    assert add(-4, 1) == -3\n",
    ),
    (
        "Write `is_palindrome(text)`: whether `text` reads the same backwards, ignoring case.",
        "def test_word():\n    assert is_palindrome('Level')\n\n"
        "def test_not():\n    assert not is_palindrome('chalk')\n\n"
        "def test_empty():\n    assert is_palindrome('')\n",
    ),
    (
        "Write `fizzbuzz(n)` returning 'Fizz', 'Buzz', 'FizzBuzz' or str(n), as the game says.",
        "def test_fizz():\n    assert fizzbuzz(9) == 'Fizz'\n\n"
        "def test_buzz():\n    assert fizzbuzz(10) == 'Buzz'\n\n"
        "def test_both():\n    assert fizzbuzz(30) == 'FizzBuzz'\n\n"
        "def test_number():\n    assert fizzbuzz(7) == '7'\n",
    ),
]


def rows() -> list[dict[str, Any]]:
    """The problems as dataset rows: ``{"prompt": [messages], "tests": "..."}``."""
    return [
        {
            "prompt": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": question},
            ],
            "tests": tests,
        }
        for question, tests in _PROBLEMS
    ]
