"""Run a Python example of the docs and hold it to the outputs it claims.

    python run_python.py EXAMPLE.py

A line ``print(...)  # -> TEXT`` of the example must print ``TEXT`` each time
it runs (``...`` in ``TEXT`` stands for any text), and must run at least once.
Anything else the example prints passes through. Exits 1 when a claim failed,
with the example's own exit status otherwise.
"""

from __future__ import annotations

import builtins
import re
import sys
from pathlib import Path
from typing import Any

CLAIM = re.compile(r"^\s*print\(.*\)\s*#\s*->\s?(.*)$")


def pattern(claim: str) -> re.Pattern[str]:
    """``claim`` as a regular expression: literal text, ``...`` matching any."""
    return re.compile(".*".join(map(re.escape, claim.strip().split("..."))), re.S)


def main(path: str) -> int:
    code = Path(path).read_text()
    claims = {
        number: claim.group(1)
        for number, line in enumerate(code.splitlines(), start=1)
        if (claim := CLAIM.match(line))
    }
    printed: dict[int, int] = dict.fromkeys(claims, 0)
    failures: list[str] = []
    real_print = builtins.print

    def checked_print(*args: Any, **kwargs: Any) -> None:
        caller = sys._getframe(1)
        if caller.f_code.co_filename == path and caller.f_lineno in claims:
            line = caller.f_lineno
            text = kwargs.get("sep", " ").join(map(str, args))
            printed[line] += 1
            if not pattern(claims[line]).fullmatch(text.strip()):
                failures.append(f"line {line} printed {text!r}, the docs say {claims[line]!r}")
        real_print(*args, **kwargs)

    builtins.print = checked_print
    status = 0
    try:
        exec(compile(code, path, "exec"), {"__name__": "__main__", "__file__": path})
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    finally:
        builtins.print = real_print
        sys.stdout.flush()
    failures += [f"line {line} never printed" for line, count in printed.items() if not count]
    for failure in failures:
        print(f"docs claim: {failure}", file=sys.stderr)
    return 1 if failures else status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
