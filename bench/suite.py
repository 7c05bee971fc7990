"""What every benchmark reports: a figure beside its baseline, as a ratio with a goal."""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass

_COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "<": operator.lt,
}


@dataclass(frozen=True)
class Figure:
    """One measured figure: what, its baseline, their ratio, and the goal for the ratio."""

    name: str
    value: str
    baseline: str
    ratio: float
    goal: str
    """``">= 1.0"``, ``"<= 1.5"``, ``"< 200"``: an operator and a number."""

    @property
    def passed(self) -> bool:
        """Whether the ratio meets the goal."""
        sign, number = self.goal.split()
        return _COMPARE[sign](self.ratio, float(number))


def table(figures: list[Figure]) -> str:
    """The figures as a plain-text table."""
    rows = [("figure", "value", "baseline", "ratio", "goal", "")]
    rows += [
        (f.name, f.value, f.baseline, f"{f.ratio:.2f}", f.goal, "pass" if f.passed else "FAIL")
        for f in figures
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in lines)
