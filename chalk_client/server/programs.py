"""One program run asked for over HTTP, as the Chalk job that does it.

``/run_code`` and Judge0's ``/submissions`` both ask to run a program on an
input, and perhaps compare its output with an expected one. Each such request
is one ``ScoringJob`` with a one-test ``tests`` judge: the code travels as the
submission's only file, the test keeps the program's stdout and stderr
(``keep_output``), and the job shows in Flower and the metrics like any other.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from chalk_client.jobs import JobResult, ScoringJob
from chalk_client.judge_specs import TestsJudge
from chalk_client.program_tests import TestCase
from chalk_client.scoring import CompileResult, TestResult, Verdict
from chalk_client.server.problems import Problem
from chalk_client.server.settings import ServerSettings
from chalk_client.submission import Submission

SOURCE_FILES = {
    "python": "main.py",
    "c": "main.c",
    "cpp": "main.cpp",
    "java": "Main.java",
    "go": "main.go",
    "rust": "main.rs",
    "javascript": "main.js",
    "bash": "main.sh",
}
"""Where each language's code goes in the job's submission."""

INTERPRETED = frozenset({"python", "javascript", "bash"})
"""Languages run from source: what the ``tests`` judge checks before running them (Python's
syntax, say) is a compile to it, but a run to SandboxFusion's and Judge0's clients."""


@dataclass(frozen=True)
class ProgramRun:
    """A program to run once: its code, its input, what to expect, its limits."""

    language: str
    """One of ``SOURCE_FILES``."""
    code: str
    stdin: str = ""
    expected: str | None = None
    """The output expected; ``None``: the run is only reported, not judged."""
    compare: str = "exact"
    time_limit_s: float = 10.0
    """CPU seconds."""
    wall_limit_s: float | None = None
    memory_mb: int = 256

    def check(self, limits: ServerSettings) -> None:
        """Raise a ``Problem`` (413 or 422) for what the server's limits refuse."""
        if len(self.code.encode()) > limits.max_code_bytes:
            raise Problem(
                413,
                "code too large",
                f"the code is {len(self.code.encode())} bytes; the limit is "
                f"{limits.max_code_bytes} (CHALK_SERVER_MAX_CODE_KB)",
            )
        for name, text in (("stdin", self.stdin), ("expected output", self.expected or "")):
            if len(text.encode()) > limits.max_stdin_bytes:
                raise Problem(
                    413,
                    f"{name} too large",
                    f"the {name} is {len(text.encode())} bytes; the limit is "
                    f"{limits.max_stdin_bytes} (CHALK_SERVER_MAX_STDIN_MB)",
                )
        for name, seconds in (("time limit", self.time_limit_s), ("wall limit", self.wall_limit_s)):
            if seconds is not None and seconds > limits.max_time_limit_s:
                raise Problem(
                    422,
                    f"{name} too long",
                    f"{seconds:g} s asked; this server allows at most {limits.max_time_limit_s:g}"
                    " s (CHALK_SERVER_MAX_TIME_LIMIT_S)",
                )
        if self.memory_mb > limits.max_memory_mb:
            raise Problem(
                422,
                "memory limit too large",
                f"{self.memory_mb} MiB asked; this server allows at most {limits.max_memory_mb} "
                "MiB (CHALK_SERVER_MAX_MEMORY_MB)",
            )

    def job(self, job_id: str | None = None, metadata: dict[str, Any] | None = None) -> ScoringJob:
        """The Chalk job that runs this program once (a fresh id unless one is given)."""
        source = SOURCE_FILES[self.language]
        judge = TestsJudge(
            language=self.language,
            source=source,
            tests=[TestCase(stdin=self.stdin, stdout=self.expected)],
            compare=self.compare,
            time_limit_s=self.time_limit_s,
            wall_limit_s=self.wall_limit_s,
            memory_limit_mb=self.memory_mb,
            keep_output=True,
        )
        return ScoringJob(
            id=job_id or uuid.uuid4().hex,
            judge=judge,
            submission=Submission(files={source: self.code}),
            metadata=metadata or {},
        )


@dataclass(frozen=True)
class RunOutcome:
    """What became of one program run, read from its job's result."""

    compile: CompileResult | None
    """How it compiled (``None``: not a compiled language, or never got that far)."""
    test: TestResult | None
    """Its one run (``None``: it never ran: no compile, or the system failed)."""
    problem: str | None
    """Why the system could not run it (a failed job, a grader error), else ``None``."""


def run_outcome(result: JobResult) -> RunOutcome:
    """The compile, the run and the system's trouble, if any, of a program run's job."""
    scoring = result.scoring
    if scoring is None:
        return RunOutcome(None, None, result.error or f"the job is {result.status.value}")
    test = scoring.tests[0] if scoring.tests else None
    if scoring.grader_error:
        return RunOutcome(scoring.compile, test, scoring.metadata.get("error", "grader error"))
    built = scoring.compile
    if scoring.metadata.get("language") in INTERPRETED and built is not None:
        if not built.ok:  # a syntax error, as the interpreter would have said it running
            test = TestResult(
                verdict=Verdict.RUNTIME_ERROR, exit_code=1, stdout="", stderr=built.stderr
            )
        built = None
    return RunOutcome(built, test, None)
