"""Checks an answer to pair sum: ``{python} -m tasks.pair_sum.checker INPUT OUTPUT EXPECTED``.

Exit 0: a right pair (or ``-1`` when there is none); 1: a wrong answer; 2: not
laid out as asked (not integers, not one or two of them). What it prints is
the reason, shown as the test's detail.
"""

import sys
from pathlib import Path


def verdict(given: str, answer: str, expected: str) -> tuple[int, str]:
    """The exit code and reason for ``answer`` to the test ``given``."""
    numbers = [int(word) for word in given.split()]
    count, target, values = numbers[0], numbers[1], numbers[2 : 2 + numbers[0]]
    try:
        said = [int(word) for word in answer.split()]
    except ValueError:
        return 2, "the output is not integers"
    none_expected = expected.split() == ["-1"]
    if said == [-1]:
        return (0, "no pair, right") if none_expected else (1, "said -1, but a pair exists")
    if len(said) != 2:
        return 2, f"expected two positions or -1, got {len(said)} numbers"
    i, j = said
    if not 1 <= i < j <= count:
        return 1, f"positions {i} {j} are not 1 <= i < j <= {count}"
    if values[i - 1] + values[j - 1] != target:
        return 1, f"{values[i - 1]} + {values[j - 1]} is not {target}"
    return 0, "a right pair"


if __name__ == "__main__":
    given, answer, expected = (Path(name).read_text() for name in sys.argv[1:4])
    code, reason = verdict(given, answer, expected)
    print(reason)
    sys.exit(code)
