"""Comparing a program's output with the expected one: ``tokens``, ``exact``, ``lines``,
numbers.

Each comparison returns a ``Verdict`` (``AC``, ``WA`` or ``PE``) and, when not
accepted, a short note of where the outputs part. (Checkers, the fourth way,
are programs of their own: ``chalk_worker.judges.programs.checker``.)
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from chalk_client.program_tests import FloatTolerance
from chalk_client.scoring import Verdict

SHOWN = 40
"""Characters of a token shown in a note."""


def _tokens(data: bytes) -> list[bytes]:
    return data.split()


def _show(token: bytes) -> str:
    text = token.decode("utf-8", errors="replace")
    return text if len(text) <= SHOWN else text[:SHOWN] + "…"


def _first_difference(got: list[bytes], wanted: list[bytes]) -> str:
    for index, (a, b) in enumerate(zip(got, wanted, strict=False)):
        if a != b:
            return f"token {index + 1}: got {_show(a)!r}, expected {_show(b)!r}"
    if len(got) < len(wanted):
        return f"{len(got)} tokens, expected {len(wanted)}: {_show(wanted[len(got)])!r} missing"
    return f"{len(got)} tokens, expected {len(wanted)}: {_show(got[len(wanted)])!r} is extra"


def compare_tokens(got: bytes, wanted: bytes) -> tuple[Verdict, str | None]:
    """Accepted when the whitespace-separated tokens are the same."""
    mine, theirs = _tokens(got), _tokens(wanted)
    if mine == theirs:
        return Verdict.ACCEPTED, None
    return Verdict.WRONG_ANSWER, _first_difference(mine, theirs)


def compare_exact(got: bytes, wanted: bytes) -> tuple[Verdict, str | None]:
    """Accepted when byte for byte the same; the same tokens laid out otherwise: ``PE``."""
    if got == wanted:
        return Verdict.ACCEPTED, None
    mine, theirs = _tokens(got), _tokens(wanted)
    if mine == theirs:
        line = _first_line_apart(got, wanted)
        return Verdict.PRESENTATION_ERROR, f"the same tokens, laid out otherwise (line {line})"
    return Verdict.WRONG_ANSWER, _first_difference(mine, theirs)


def _lines(data: bytes) -> bytes:
    """The text as Judge0 compares it: each line's trailing whitespace and the text's
    leading and trailing whitespace dropped."""
    return b"\n".join(line.rstrip() for line in data.split(b"\n")).strip()


def compare_lines(got: bytes, wanted: bytes) -> tuple[Verdict, str | None]:
    """Accepted when equal but for trailing spaces on lines and blank lines around the text
    (Judge0's rule); otherwise a wrong answer, however close the tokens."""
    mine, theirs = _lines(got), _lines(wanted)
    if mine == theirs:
        return Verdict.ACCEPTED, None
    line = _first_line_apart(mine, theirs)
    return Verdict.WRONG_ANSWER, f"line {line} differs"


def _first_line_apart(got: bytes, wanted: bytes) -> int:
    mine, theirs = got.split(b"\n"), wanted.split(b"\n")
    for number, (a, b) in enumerate(zip(mine, theirs, strict=False), start=1):
        if a != b:
            return number
    return min(len(mine), len(theirs)) + 1


def _number(token: bytes) -> float | None:
    try:
        value = float(token)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _pairs(got: list[bytes], wanted: list[bytes]) -> Iterator[tuple[int, bytes, bytes]]:
    for index, (a, b) in enumerate(zip(got, wanted, strict=False)):
        yield index, a, b


def compare_numbers(got: bytes, wanted: bytes, tolerance: float) -> tuple[Verdict, str | None]:
    """Tokens equal, or both numbers within ``tolerance`` absolutely or relatively."""
    mine, theirs = _tokens(got), _tokens(wanted)
    if len(mine) != len(theirs):
        return Verdict.WRONG_ANSWER, _first_difference(mine, theirs)
    for index, a, b in _pairs(mine, theirs):
        if a == b:
            continue
        x, y = _number(a), _number(b)
        if x is None or y is None:
            return Verdict.WRONG_ANSWER, _first_difference(mine[index:], theirs[index:])
        error = abs(x - y)
        if error > tolerance and error > tolerance * abs(y):
            return (
                Verdict.WRONG_ANSWER,
                f"token {index + 1}: got {_show(a)}, expected {_show(b)} "
                f"(differ by {error:.3g}, more than {tolerance:g})",
            )
    return Verdict.ACCEPTED, None


def compare_outputs(
    got: bytes, wanted: bytes, how: str | FloatTolerance
) -> tuple[Verdict, str | None]:
    """``got`` against ``wanted`` by ``tokens``, ``exact``, ``lines`` or a ``FloatTolerance``."""
    if isinstance(how, FloatTolerance):
        return compare_numbers(got, wanted, how.float_tolerance)
    if how == "exact":
        return compare_exact(got, wanted)
    if how == "lines":
        return compare_lines(got, wanted)
    return compare_tokens(got, wanted)
