"""What the end of a run means for a ``tests`` judge: a compile that failed, a runtime
error in words, a run held back by a busy machine, a command that may run warm."""

from __future__ import annotations

import contextlib
import signal
import sys

from chalk_client.scoring import CompileResult
from chalk_client.settings import ChalkSettings
from chalk_worker.sandbox.process import ProcessLimits, ProcessOutcome
from chalk_worker.sandbox.pycommand import PythonCommand, parse_python_command
from chalk_worker.sandbox.session import SlotUsage

MiB = 1024 * 1024


def starved(before: SlotUsage, after: SlotUsage, wall_s: float) -> bool:
    """Whether a run spent at least half its wall time running or waiting for a CPU: a run
    that reached its wall-clock cap so was held back by a busy machine (run it again);
    one that did neither was waiting for something else. Without the counts: assume so."""
    if None in (before.cpu_s, after.cpu_s, before.cpu_stall_s, after.cpu_stall_s):
        return True
    assert before.cpu_s is not None and after.cpu_s is not None
    assert before.cpu_stall_s is not None and after.cpu_stall_s is not None
    busy = (after.cpu_s - before.cpu_s) + (after.cpu_stall_s - before.cpu_stall_s)
    return busy >= 0.5 * wall_s


def warm_form(argv: list[str], settings: ChalkSettings) -> PythonCommand | None:
    """``argv``'s warm form when it runs the worker's Python and warm runs are on."""
    if argv[0] != sys.executable or not settings.warm_python:
        return None
    return parse_python_command(argv)


class SourceRejected(Exception):
    """Raised when a program checked as it starts did not parse (a ``CE`` of every test)."""

    def __init__(self, result: CompileResult) -> None:
        super().__init__(result.stderr)
        self.result = result


def did_not_parse(outcome: ProcessOutcome, parse_errors: tuple[str, ...]) -> bool:
    """Whether a run ended as its runtime ends a source that does not parse: status 1, no
    traceback (nothing ran), and one of ``parse_errors`` as the last line of stderr. (A
    program that prints as much of itself only earns itself a ``CE``.)"""
    if outcome.returncode != 1 or not parse_errors:
        return False
    text = outcome.stderr.strip()
    if not text or text.startswith("Traceback (most recent call last):"):
        return False
    last = text.splitlines()[-1]
    return any(last.startswith(f"{name}:") for name in parse_errors)


class ToolchainUnusable(Exception):
    """Raised when a toolchain this worker found cannot start in the sandbox (installed
    where the sandbox does not show it, say): the grader's failure, not the student's."""


def compile_problem(
    outcome: ProcessOutcome, limits: ProcessLimits, cpu_s: float | None = None
) -> str | None:
    """Why a compile failed, in words; ``None`` if it succeeded. ``cpu_s``: the CPU time
    it used (a compiler's driver reports its killed pass as an exit status of its own)."""
    if outcome.start_error is not None:
        raise ToolchainUnusable(f"the compiler could not start: {outcome.start_error}")
    code = outcome.returncode
    if code == 0 and not outcome.timed_out:
        return None
    if limits.cpu_s is not None and cpu_s is not None and cpu_s >= 0.95 * limits.cpu_s:
        return f"the compile used {cpu_s:.1f} s of CPU, the limit is {limits.cpu_s:g} s"
    if outcome.timed_out:
        return f"the compile took longer than {limits.wall_s:g} s"
    if outcome.memory_exceeded:
        return f"the compile used more than {limits.memory_bytes // MiB} MiB of memory"
    if code in (-signal.SIGXCPU, 128 + signal.SIGXCPU, -signal.SIGKILL):
        return f"the compile used more than {limits.cpu_s:g} s of CPU"
    if code in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
        return f"the compile wrote a file larger than {limits.file_size_bytes // MiB} MiB"
    if code != 0:
        return f"the compiler exited with status {code}"
    return None


def runtime_error(outcome: ProcessOutcome) -> str:
    code = outcome.returncode or 0
    if code < 0:
        return f"killed by signal {-code} ({signal_name(-code)})"
    if outcome.maybe_signal:
        return f"exit status {code} (or killed by signal {code - 128}, {signal_name(code - 128)})"
    last = outcome.stderr.strip().splitlines()[-1:] if outcome.stderr.strip() else []
    said = f": {capped(last[0], 200)}" if last else ""
    return f"exit status {code}{said}"


def signal_name(number: int) -> str:
    with contextlib.suppress(ValueError):
        return signal.Signals(number).name
    return "unknown"


def capped(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
