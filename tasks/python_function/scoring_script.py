"""Tests the student's ``fizzbuzz`` without ever running the student's code in this process.

Run as ``{python} -m tasks.python_function.scoring_script {submission} score.json``.

The pattern, and why each piece is there (the sandbox already isolates the
script from the worker; these keep the *student's* code from deciding the verdict):

1. This process is made non-dumpable first: the student's code runs as the same
   user, and could otherwise attach to it (ptrace) or rewrite its memory.
2. The student's code runs in a child process (``RUNNER``), never imported here:
   imported here, it could write the output file with ``"score": 1`` and exit 0.
3. The child cannot start processes or threads (``RLIMIT_NPROC`` 0): nothing of
   the student's outlives it to rewrite the output file after this script wrote it.
   It also gets a CPU limit, a cap on what it writes, a wall-clock timeout, an
   empty environment and a scratch folder of its own.
4. Inputs are random, drawn here; the child gets them on stdin and answers on
   stdout; only answers equal to the expected ones count.
5. Once the child is gone, this script writes its verdict *over* whatever is at
   the output path (a file the child left there is reported as tampering).
"""

import contextlib
import ctypes
import json
import os
import resource
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CASES = 50
"""Random inputs tried, besides the fixed ones."""
TIMEOUT_S = 10.0
"""Wall-clock seconds the student's code gets for all the cases."""
CPU_S = 10
ANSWER_BYTES = 1024 * 1024
"""The most the student's code may write (its answers and prints)."""
PR_SET_DUMPABLE = 4

RUNNER = r"""
import importlib.util, json, os, sys
inputs = json.loads(sys.stdin.read())
answers = os.fdopen(os.dup(1), "w")
sys.stdout = sys.stderr  # the student's prints go to stderr, not into the answers
spec = importlib.util.spec_from_file_location("solution", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
results = []
for n in inputs:
    try:
        results.append(str(module.fizzbuzz(n)))
    except Exception as exc:
        results.append(f"error: {type(exc).__name__}")
answers.write("\n" + json.dumps(results) + "\n")
answers.flush()
"""
"""What the child runs: import the solution from its path, answer every input, one JSON line."""


def expected(n: int) -> str:
    """The right answer."""
    if n % 15 == 0:
        return "FizzBuzz"
    if n % 3 == 0:
        return "Fizz"
    if n % 5 == 0:
        return "Buzz"
    return str(n)


def not_dumpable() -> None:
    """Forbid ptrace and /proc/PID/mem access to this process by others of the same user."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def confine() -> None:
    """In the child, before the student's code runs: no new processes, capped CPU and writes."""
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_S, CPU_S))
    resource.setrlimit(resource.RLIMIT_FSIZE, (ANSWER_BYTES, ANSWER_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_student(solution: Path, inputs: list[int]) -> tuple[list[str] | None, str]:
    """The child's answers (``None`` if it gave none) and what went wrong, if anything."""
    scratch = Path(tempfile.mkdtemp(prefix="student-"))
    answers = scratch / "answers"
    try:
        with answers.open("w+b") as out:
            try:
                child = subprocess.run(
                    [sys.executable, "-I", "-c", RUNNER, str(solution)],
                    input=json.dumps(inputs).encode(),
                    stdout=out,
                    stderr=subprocess.DEVNULL,
                    cwd=scratch,
                    env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                    preexec_fn=confine,
                    start_new_session=True,
                    timeout=TIMEOUT_S,
                )
            except subprocess.TimeoutExpired:
                return None, f"the solution took more than {TIMEOUT_S:g} s"
            out.seek(0)
            text = out.read(ANSWER_BYTES).decode("utf-8", "replace")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if child.returncode != 0:
        return None, f"the solution's process ended with status {child.returncode}"
    try:
        results = json.loads(text.rstrip("\n").rsplit("\n", 1)[-1])
    except ValueError:
        return None, "the solution's process gave no answers"
    if not isinstance(results, list) or len(results) != len(inputs):
        return None, "the solution's process gave malformed answers"
    return [str(result) for result in results], ""


def write_verdict(path: Path, verdict: dict[str, Any]) -> None:
    """Write the verdict at ``path``, replacing whatever the student's code may have put there."""
    with contextlib.suppress(PermissionError):
        os.chmod(path.parent, 0o700)  # ours; the student's code may have closed it
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    staged = path.parent / f".{path.name}.{secrets.token_hex(8)}"
    staged.write_text(json.dumps(verdict))
    os.replace(staged, path)  # atomic, and a link at ``path`` is replaced, not followed


def main(solution: Path, output: Path) -> None:
    """Score ``solution`` and write the verdict to ``output``."""
    not_dumpable()
    if os.geteuid() == 0:
        # As root, RLIMIT_NPROC does not hold and the student's code could do anything.
        raise SystemExit("refusing to run the student's code as root")
    if not solution.is_file():
        write_verdict(output, {"score": 0.0, "metadata": {"missing": solution.name}})
        return
    inputs = [1, 3, 5, 15, 30, *(secrets.randbelow(10**6) + 1 for _ in range(CASES))]
    answers, problem = run_student(solution, inputs)
    metadata: dict[str, Any] = {"cases": len(inputs)}
    if os.path.lexists(output):
        # Only the student's code can have put something there: that is tampering.
        metadata["tampered"] = "the solution wrote to the scoring script's output file"
        score = 0.0
    elif answers is None:
        metadata["problem"] = problem
        score = 0.0
    else:
        wrong = [n for n, answer in zip(inputs, answers, strict=True) if answer != expected(n)]
        metadata["passed"] = len(inputs) - len(wrong)
        if wrong:
            metadata["first_wrong"] = f"fizzbuzz({wrong[0]})"
        score = (len(inputs) - len(wrong)) / len(inputs)
    write_verdict(output, {"score": score, "metadata": metadata})


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
