"""Scores the model's ``solution.py`` by the fraction of the row's tests it passes.

Run as ``{python} -m tasks.code_reward.run_tests SUBMISSION_DIR OUTPUT``, where
``SUBMISSION_DIR`` holds ``solution.py`` (the model's code) and ``tests.py``
(the row's tests: top-level ``def test_...():`` functions using the solution's
names, as with ``from solution import *``).

The tests are listed here, by parsing ``tests.py``, never by running the
model's code; each then runs in a fresh interpreter of its own, under a time
limit. A test passes when its interpreter prints the end marker with a nonce
it read before the model's code ran, and exits 0: a solution that exits
early, or prints a fake verdict, fails. Code running in the same interpreter
can still find the nonce by introspection, so treat this as a raised bar, not
a proof: a policy under optimisation pressure looks for such holes, so check
high rewards against held-out tests too. The worker's sandbox contains the
rest (time, memory, processes, files, network).
"""

from __future__ import annotations

import ast
import json
import secrets
import subprocess
import sys
from pathlib import Path

TEST_TIMEOUT_S = 10.0
"""Seconds one test may run, the solution's import included."""
SHOWN_FAILURES = 5

HARNESS = """
import sys
marker = "chalk-test-passed " + sys.stdin.readline().strip()
sys.path.insert(0, ".")
import solution
scope = {name: getattr(solution, name) for name in dir(solution) if not name.startswith("__")}
with open("tests.py") as source:
    exec(compile(source.read(), "tests.py", "exec"), scope)
scope[sys.argv[1]]()
print(marker, flush=True)
"""


def listed_tests(tests: str) -> list[str]:
    """The top-level ``test_*`` functions of the tests' source, in order."""
    tree = ast.parse(tests)
    return [
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.name.startswith("test_")
    ]


def run_test(folder: Path, name: str) -> str | None:
    """``None`` if test ``name`` passes against the solution in ``folder``, else why not."""
    nonce = secrets.token_hex(16)
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-B", "-c", HARNESS, name],
            cwd=folder,
            input=nonce + "\n",
            capture_output=True,
            text=True,
            timeout=TEST_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"{name}: timed out after {TEST_TIMEOUT_S:g} s"
    lines = done.stdout.splitlines()
    if done.returncode == 0 and lines and lines[-1] == f"chalk-test-passed {nonce}":
        return None
    error = done.stderr.strip().splitlines()
    return f"{name}: {error[-1] if error else f'exited with status {done.returncode}'}"


def score(folder: Path) -> dict[str, object]:
    """The verdict: the fraction of tests passed, and which failed."""
    solution, tests = folder / "solution.py", folder / "tests.py"
    if not solution.is_file() or not tests.is_file():
        return {"score": 0.0, "metadata": {"error": "solution.py or tests.py is missing"}}
    try:
        names = listed_tests(tests.read_text())
    except SyntaxError as exc:
        return {"score": 0.0, "metadata": {"error": f"the tests do not parse: {exc}"}}
    if not names:
        return {"score": 0.0, "metadata": {"error": "tests.py defines no test_ function"}}
    failures = [why for why in (run_test(folder, name) for name in names) if why is not None]
    passed = len(names) - len(failures)
    return {
        "score": passed / len(names),
        "metadata": {
            "passed": f"{passed}/{len(names)}",
            "failures": "\n".join(failures[:SHOWN_FAILURES]),
        },
    }


if __name__ == "__main__":
    submission_dir, output_path = Path(sys.argv[1]), Path(sys.argv[2])
    output_path.write_text(json.dumps(score(submission_dir)))
