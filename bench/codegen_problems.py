"""What a code-generation problem is (the families: ``codegen_numbers``, ``codegen_texts``).

Each family takes a variant number and returns a ``Problem``: the function to
write, a correct body, a wrong one (off by one, an edge case forgotten, the
wrong rule) and the asserts of its check. See ``bench.codegen_corpus``.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """A problem of a family: its function, the right and a wrong body, and its asserts."""

    name: str
    correct: str
    wrong: str
    asserts: str


def code(text: str) -> str:
    """``text`` dedented, stripped, with one final newline: a body as a file holds it."""
    return textwrap.dedent(text).strip() + "\n"
