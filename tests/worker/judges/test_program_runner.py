"""A test's time-limit verdict in ``ProgramRunner``, against a scripted session.

The session plays back each run's end and the CPU time the slot's cgroup counted for
it, so the cases the real sandbox only meets on a busy machine (``RLIMIT_CPU``'s
tick-sampled count running ahead of the cgroup's exact one) are met every time.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from chalk_client import ChalkSettings
from chalk_client.judges import TestsJudge
from chalk_client.program_tests import TestCase
from chalk_client.scoring import TestResult, Verdict
from chalk_worker.judges.programs.languages import LANGUAGES, Toolchain
from chalk_worker.judges.programs.runner import ProgramRunner, cpu_backstop
from chalk_worker.sandbox.process import ProcessLimits, ProcessOutcome
from chalk_worker.sandbox.session import SandboxSession, SlotUsage

XCPU = -signal.SIGXCPU
"""The return code of a run ``RLIMIT_CPU``'s soft limit stopped."""


@dataclass
class ScriptedSession:
    """Plays back ``runs``: each run's return code, stdout and the CPU seconds the cgroup
    counts for it (``None``: this machine has no cgroup counting CPU time)."""

    scratch: Path
    runs: list[tuple[int, bytes, float | None]]
    limits: list[ProcessLimits] = field(default_factory=list)
    cpu_s: float = 0.0
    slot: None = None
    sandbox: Any = field(
        default_factory=lambda: SimpleNamespace(layers=SimpleNamespace(bwrap=None))
    )

    @property
    def home(self) -> Path:
        return self.scratch / "home"

    def start_measuring(self) -> None:
        pass

    def usage(self) -> SlotUsage:
        counted = self.runs[0][2] is not None if self.runs else True
        return SlotUsage(self.cpu_s if counted else None, 0, 0, 0.0 if counted else None)

    def run(self, argv: list[str], *, limits: ProcessLimits, **_: Any) -> ProcessOutcome:
        code, stdout, cpu = self.runs.pop(0)
        self.limits.append(limits)
        self.cpu_s += cpu or 0.0
        return ProcessOutcome(
            returncode=code,
            timed_out=False,
            stdout=stdout.decode(),
            stderr="",
            duration_s=(cpu or 0.0) + 0.01,
            output=stdout,
        )


def run_once(
    tmp_path: Path, runs: list[tuple[int, bytes, float | None]]
) -> tuple[TestResult, ScriptedSession]:
    """The verdict of one test (a + b, limit 1 s) run on a session playing ``runs``."""
    session = ScriptedSession(tmp_path, runs)
    judge = TestsJudge(tests=[{"stdin": "1 2\n", "stdout": "3\n"}], time_limit_s=1.0)
    settings = ChalkSettings()
    toolchain = Toolchain(LANGUAGES["bash"], {"bash": "/bin/bash"}, "bash")
    runner = ProgramRunner(
        cast(SandboxSession, session),
        toolchain,
        judge,
        settings,
        settings.resolve(),
        None,
        tmp_path,
    )
    try:
        result = runner.run_test(["/bin/bash", "main.sh"], TestCase(stdin="1 2\n", stdout="3\n"))
    finally:
        runner.close()
    assert not session.runs, "runs left unplayed"
    return result, session


def test_the_rlimit_is_a_backstop_above_the_limit() -> None:
    assert [cpu_backstop(limit) for limit in (0.1, 0.5, 1.0, 1.6, 2.0, 4.0, 10.0)] == [
        1,
        1,
        2,
        3,
        3,
        5,
        13,
    ]


def test_sigxcpu_within_the_limit_by_the_exact_count_runs_again(tmp_path: Path) -> None:
    # The kernel's sampled count said 1 s, the cgroup 0.85 s: a busy machine, not a TLE.
    result, session = run_once(tmp_path, [(XCPU, b"", 0.85), (0, b"3\n", 0.3)])
    assert result.verdict is Verdict.ACCEPTED and result.retried, result
    assert result.cpu_s == pytest.approx(0.3)
    assert [limits.cpu_rlimit for limits in session.limits] == [(2, 3), (2, 3)]


def test_a_run_that_needs_little_cpu_is_accepted_at_once(tmp_path: Path) -> None:
    result, _ = run_once(tmp_path, [(0, b"3\n", 0.3)])
    assert result.verdict is Verdict.ACCEPTED and not result.retried, result


@pytest.mark.parametrize(
    ("code", "cpu"),
    [(XCPU, 2.01), (0, 1.3)],
    ids=["stopped at the backstop", "ended over the limit"],
)
def test_more_cpu_than_the_limit_by_the_exact_count_is_a_tle(
    tmp_path: Path, code: int, cpu: float
) -> None:
    result, _ = run_once(tmp_path, [(code, b"3\n", cpu)])
    assert result.verdict is Verdict.TIME_LIMIT and not result.retried, result
    assert f"used {cpu:.2f} s of CPU, over the limit of 1 s" == result.detail


def test_sigxcpu_twice_within_the_limit_is_a_runtime_error(tmp_path: Path) -> None:
    # A program that sends itself SIGXCPU did not use its time: not a TLE.
    result, _ = run_once(tmp_path, [(XCPU, b"", 0.01), (XCPU, b"", 0.01)])
    assert result.verdict is Verdict.RUNTIME_ERROR and result.retried, result
    assert "SIGXCPU" in (result.detail or "") and "within the limit of 1 s" in (result.detail or "")


def test_without_a_cgroup_the_rlimit_is_the_limit(tmp_path: Path) -> None:
    result, session = run_once(tmp_path, [(XCPU, b"", None)])
    assert result.verdict is Verdict.TIME_LIMIT and not result.retried, result
    assert result.detail == "stopped at its CPU time limit of 1 s"
    assert [limits.cpu_rlimit for limits in session.limits] == [(1, 2)]
