"""Checkers: a program of the grader's decides each test (testlib's exit codes).

The checker runs in the same sandbox session as the program, after it, with
three files in the run's scratch folder (the test's input, the program's
output, the expected output), removed once it ends: the program never runs
while they exist. Exit 0 accepted, 1 wrong answer, 2 presentation error; what
it prints is the test's detail. Anything else (a crash, a Python traceback, a
time-out) is the grader's failure: ``CheckerFailed``.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from chalk_client.program_tests import CHECKER_FILES, Checker, TestCase
from chalk_client.scoring import Verdict
from chalk_client.settings import ChalkSettings, ResolvedLimits
from chalk_worker.judges.programs.outcomes import capped, runtime_error, warm_form
from chalk_worker.sandbox.process import ProcessLimits
from chalk_worker.sandbox.session import SandboxSession

MiB = 1024 * 1024
CHECKER_WALL_S = 60.0
"""Wall-clock seconds a checker may take for one test."""
DETAIL_SHOWN = 300
"""Characters of a checker's message kept as a test's detail."""
PYTHON_TRACEBACK = "Traceback (most recent call last):"


class CheckerFailed(Exception):
    """Raised when a checker misbehaves (crashes, times out, answers neither 0, 1 nor 2):
    the grader's failure, not the student's."""


@dataclass(frozen=True)
class CheckerSetting:
    """What a checker runs with: the job's settings and limits, an environment, the
    read-only paths its command needs (the submission, paths it names)."""

    settings: ChalkSettings
    limits: ResolvedLimits
    env: dict[str, str]
    readonly: list[Path]


def run_checker(
    session: SandboxSession,
    checker: Checker,
    case: TestCase,
    output: bytes,
    setting: CheckerSetting,
) -> tuple[Verdict, str | None]:
    """The checker's verdict on one test (and what it said); ``CheckerFailed`` if it
    misbehaved. Its three files are in the run's scratch only while it runs."""
    folder = session.scratch / "check"
    os.mkdir(folder, 0o755)
    try:
        files = {
            "{input}": folder / "input.txt",
            "{output}": folder / "output.txt",
            "{expected}": folder / "expected.txt",
        }
        contents = (case.stdin.encode(), output, case.stdout.encode())
        for path, data in zip(files.values(), contents, strict=True):
            path.write_bytes(data)
            os.chmod(path, 0o644)
        argv = checker_argv(checker.checker, files)
        outcome = session.run(
            argv,
            cwd=folder,
            env=setting.env,
            limits=ProcessLimits(
                wall_s=CHECKER_WALL_S,
                file_size_bytes=setting.limits.file_size_mb * MiB,
                memory_bytes=setting.limits.memory_mb * MiB,
                processes=setting.limits.processes,
            ),
            readonly=setting.readonly,
            python=warm_form(argv, setting.settings),
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    said = capped((outcome.stdout.strip() or outcome.stderr.strip()), DETAIL_SHOWN) or None
    verdicts = {0: Verdict.ACCEPTED, 1: Verdict.WRONG_ANSWER, 2: Verdict.PRESENTATION_ERROR}
    # A Python checker that raised exits 1 too: its traceback tells it from a wrong answer.
    crashed = PYTHON_TRACEBACK in outcome.stderr
    ended = outcome.start_error is None and not outcome.timed_out and not crashed
    if ended and outcome.returncode in verdicts:
        return verdicts[outcome.returncode], said
    if outcome.start_error is not None:
        why = outcome.start_error
    elif outcome.timed_out:
        why = f"timed out after {CHECKER_WALL_S:g} s"
    elif crashed:
        why = f"raised an exception: {capped(outcome.stderr.strip().splitlines()[-1], 200)}"
    else:
        why = runtime_error(outcome)
    raise CheckerFailed(
        f"the checker {checker.checker[0]!r} {why}, not 0, 1 or 2 (testlib's accepted, "
        f"wrong, presentation error): {said or 'it said nothing'}"
    )


def checker_argv(command: list[str], files: dict[str, Path]) -> list[str]:
    """The checker's command, placeholders filled, the three files appended where unplaced."""
    argv = []
    for word in command:
        word = word.replace("{python}", sys.executable)
        for name, path in files.items():
            word = word.replace(name, str(path))
        argv.append(word)
    if not any(name in word for word in command for name in CHECKER_FILES):
        argv += [str(path) for path in files.values()]
    return argv
