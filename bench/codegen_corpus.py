"""A code-generation corpus: problems with a correct and a wrong completion, and checks.

Each problem is a function to write (its ``entry_point``), a ``check(candidate)``
of real asserts, and two completions: one that passes and one with a bug
(off by one, an edge case forgotten, the wrong rule). Thirty families of
problems, each in six variants (a different constant, name or rule), give 180
problems and 360 samples. Eight wrong completions misbehave instead: three
loop for ever, three end the interpreter (a segmentation fault, ``os._exit``,
``SystemExit``), one fails on an unknown name, one prints 200 kB.

    samples(limit=None) -> list[Sample]
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from bench import codegen_numbers, codegen_texts
from bench.codegen_problems import Problem

FAMILIES = codegen_numbers.FAMILIES + codegen_texts.FAMILIES
VARIANTS = 6


@dataclass(frozen=True)
class Sample:
    """One completion to judge: the program, the problem's check, and what it should get."""

    sample_id: str
    problem_id: str
    entry_point: str
    completion: str
    """``solution.py``: the function (and whatever it needs)."""
    check: str
    """The problem's test: ``def check(candidate): assert ...``."""
    expected: bool
    """Whether the completion is correct (and so should pass)."""


MISBEHAVING = [
    "    while True:\n        pass\n",
    "    import ctypes\n    return ctypes.string_at(0)\n",
    "    import os\n    os._exit(0)\n",
    "    raise SystemExit(0)\n",
    "    import time\n    time.sleep(60)\n",
    "    return undefined_name\n",
    "    n = 1\n    while n:\n        n += 1\n",
    "    import sys\n    sys.stdout.write('x' * 200000)\n    return None\n",
]
"""Bodies that replace a few wrong completions: three loop, three end the interpreter
(a segmentation fault, ``os._exit``, ``SystemExit``), one fails, one prints 200 kB."""


def _misbehaving(problem: Problem, body: str) -> str:
    first_line = problem.correct.splitlines()[0]  # the def line
    return f"{first_line}\n{body}"


def samples(limit: int | None = None) -> list[Sample]:
    """The corpus: each problem's correct then wrong sample (``limit``: the first ones only).

    With a limit, fewer misbehave (one per ten samples, at least a loop and a
    crash), spread through the kept problems: a smoke run stays short.
    """
    problems = [family(k) for k in range(1, VARIANTS + 1) for family in FAMILIES]
    misbehaving = MISBEHAVING
    if limit is not None:
        problems = problems[: max(1, limit // 2)]
        misbehaving = MISBEHAVING[: max(2, limit // 10)]
    found: list[Sample] = []
    spread = max(1, len(problems) // len(misbehaving))
    for number, problem in enumerate(problems):
        check = f"def check(candidate):\n{textwrap.indent(problem.asserts, '    ')}"
        pid = f"p{number:03d}-{problem.name}"
        wrong = problem.wrong
        if number % spread == spread // 2 and number // spread < len(misbehaving):
            wrong = _misbehaving(problem, misbehaving[number // spread])
        for suffix, completion, expected in (("ok", problem.correct, True), ("bug", wrong, False)):
            found.append(Sample(f"{pid}-{suffix}", pid, problem.name, completion, check, expected))
    return found
