"""Checkers: a program of the grader's decides each test (testlib's exit codes).

The checker runs in the same sandbox session as the program, after it (asked
first, once, whether an expected output is right), with
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
from chalk_worker.judges.executable import named_paths
from chalk_worker.judges.programs.outcomes import capped, runtime_error, warm_form
from chalk_worker.sandbox.process import ProcessLimits, ProcessOutcome
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
    """What a checker runs with: the job's settings and limits, an environment, and the
    submission's folder (shown to it, read-only, with the host paths its command names)."""

    settings: ChalkSettings
    limits: ResolvedLimits
    env: dict[str, str]
    submission_dir: Path


class TestChecker:
    """The job's checker: asked once whether an expected output is right, then each test.

    The first question catches a checker that would mark every answer wrong for
    a reason of its own (its command cannot start, a module name with a typo,
    arguments it cannot parse: Python and bash exit 1 or 2 then, which read as
    testlib's wrong answer and presentation error).
    """

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(self, session: SandboxSession, checker: Checker, setting: CheckerSetting) -> None:
        self.session = session
        self.command = checker.checker
        self.setting = setting
        self.trusted = False

    def verdict(self, case: TestCase, output: bytes) -> tuple[Verdict, str | None]:
        """The checker's verdict on ``output`` for ``case`` (and what it said)."""
        expected = (case.stdout or "").encode()
        if not self.trusted:
            verdict, said = self._ask(case, expected)
            if verdict is not Verdict.ACCEPTED:
                raise CheckerFailed(
                    f"the checker {self.command[0]!r} does not accept a test's expected output "
                    f"as its answer ({verdict.value}: {said or 'it said nothing'}); check its "
                    "command (a path it cannot open, a module name, its arguments)"
                )
            self.trusted = True
        return self._ask(case, output)

    def _ask(self, case: TestCase, output: bytes) -> tuple[Verdict, str | None]:
        """Run the checker once on ``output``; ``CheckerFailed`` if it misbehaved."""
        folder = self.session.scratch / "check"
        os.mkdir(folder, 0o755)
        try:
            files = {
                "{input}": folder / "input.txt",
                "{output}": folder / "output.txt",
                "{expected}": folder / "expected.txt",
            }
            contents = (case.stdin.encode(), output, (case.stdout or "").encode())
            try:
                for path, data in zip(files.values(), contents, strict=True):
                    path.write_bytes(data)
                    os.chmod(path, 0o644)
            except OSError as exc:
                raise CheckerFailed(
                    f"the checker's files could not be written: {exc.strerror}"
                ) from None
            argv = checker_argv(self.command, files, self.setting.submission_dir)
            shown = [self.setting.submission_dir]
            if self.setting.settings.sandbox_named_paths:
                shown += named_paths(argv, self.session, shown)
            outcome = self.session.run(
                argv,
                cwd=folder,
                env=self.setting.env,
                limits=ProcessLimits(
                    wall_s=CHECKER_WALL_S,
                    file_size_bytes=self.setting.limits.file_size_mb * MiB,
                    memory_bytes=self.setting.limits.memory_mb * MiB,
                    processes=self.setting.limits.processes,
                ),
                readonly=shown,
                python=warm_form(argv, self.setting.settings),
            )
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return _verdict(self.command, outcome)


def _verdict(command: list[str], outcome: ProcessOutcome) -> tuple[Verdict, str | None]:
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
        f"the checker {command[0]!r} {why}, not 0, 1 or 2 (testlib's accepted, "
        f"wrong, presentation error): {said or 'it said nothing'}"
    )


def checker_argv(command: list[str], files: dict[str, Path], submission_dir: Path) -> list[str]:
    """The checker's command, placeholders filled, the three files appended where unplaced."""
    argv = []
    for word in command:
        word = word.replace("{python}", sys.executable)
        word = word.replace("{submission_dir}", str(submission_dir))
        for name, path in files.items():
            word = word.replace(name, str(path))
        argv.append(word)
    if not any(name in word for word in command for name in CHECKER_FILES):
        argv += [str(path) for path in files.values()]
    return argv
