"""One program's stay in the sandbox: built once, then run on each test, checked if asked.

A ``ProgramRunner`` holds one sandbox session (a slot, a scratch folder) for the
whole job. In the scratch folder:

- ``home/``: where the compiler works (the slot's user may write), emptied of
  all but the build afterwards;
- ``build/``: the program as built (or as the build cache had it), owned by
  root: runs read and execute it, and cannot change it for the tests after;
- ``run/``: each test's working folder and ``HOME``, made afresh per test;
- ``check/``: a checker's three files, there only while the checker runs.

A test's input is handed to the program as its stdin from a memory file of the
worker's (the run has no view of it), and its stdout comes back through a
pipe, up to ``CHALK_PROGRAM_OUTPUT_MB``. CPU time and peak memory are the
slot's cgroups' counts over the run.

The time limit is CPU time, and the cgroup's count of it (``cpu.stat``, exact)
decides a ``TLE``. The kernel's ``RLIMIT_CPU`` samples at each tick and can charge
a process more than it ran (steal time on a shared VM, say), so where the cgroup
counts, the rlimit is only a backstop above the limit (``cpu_backstop``) that
stops a program looping for ever; a run it stops under the limit by the exact
count runs again. Where no cgroup counts, the rlimit is the limit.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from chalk_client.judge_specs import TestsJudge
from chalk_client.program_tests import Checker, TestCase
from chalk_client.scoring import CompileResult, TestResult, Verdict
from chalk_client.settings import ChalkSettings, ResolvedLimits
from chalk_worker.judges.programs.builds import MAX_FILES, BuildCache, build_key
from chalk_worker.judges.programs.checker import CheckerSetting, TestChecker
from chalk_worker.judges.programs.compare import compare_outputs
from chalk_worker.judges.programs.languages import Toolchain, java_main_class
from chalk_worker.judges.programs.outcomes import (
    SourceRejected,
    ToolchainUnusable,
    capped,
    compile_problem,
    did_not_parse,
    runtime_error,
    starved,
    warm_form,
)
from chalk_worker.sandbox.bwrap import task_folders
from chalk_worker.sandbox.environment import script_env
from chalk_worker.sandbox.process import ProcessLimits, ProcessOutcome
from chalk_worker.sandbox.session import SandboxSession

MiB = 1024 * 1024
COMPILER_MESSAGES_SHOWN = 8 * 1024
"""Bytes of the compiler's messages kept in the result."""


def wall_cap(time_limit_s: float) -> float:
    """The wall-clock cap of a test: three times its CPU limit, and a second more."""
    return 3 * time_limit_s + 1


def cpu_backstop(time_limit_s: float) -> int:
    """The ``RLIMIT_CPU`` of a test whose CPU time the slot's cgroup counts: its limit and
    a quarter more, at least half a second more, in whole seconds (rounded up). Room for
    the kernel's tick-sampled count to run ahead of the exact one; below the wall cap."""
    return math.ceil(time_limit_s + max(0.5, 0.25 * time_limit_s))


def stopped_for_cpu(outcome: ProcessOutcome) -> bool:
    """Whether ``RLIMIT_CPU``'s signal (``SIGXCPU``) ended the run."""
    return outcome.returncode in (-signal.SIGXCPU, 128 + signal.SIGXCPU)


class Measured(TypedDict):
    """What one run of the program used (``TestResult``'s fields of the same names)."""

    cpu_s: float | None
    wall_s: float
    memory_mb: float | None
    exit_code: int | None


@dataclass(frozen=True)
class Built:
    """The program, ready to run: its command, and how its build went."""

    argv: list[str]
    result: CompileResult | None
    """``None`` for a language that does not compile."""


class ProgramRunner:
    """Builds one program in ``session`` and runs it on test cases."""

    def __init__(
        self,
        session: SandboxSession,
        toolchain: Toolchain,
        judge: TestsJudge,
        settings: ChalkSettings,
        limits: ResolvedLimits,
        cache: BuildCache | None,
        submission_dir: Path,
    ) -> None:
        self.session = session
        self.toolchain = toolchain
        self.spec = toolchain.spec
        self.judge = judge
        self.settings = settings
        self.limits = limits
        self.memory_mb = min(judge.memory_limit_mb, settings.max_memory_mb)
        self.cache = cache
        self.build_dir = session.scratch / "build"
        self.run_dir = session.scratch / "run"
        self.env = self._environment()
        self._stdin = os.memfd_create("chalk-test-input", os.MFD_CLOEXEC)
        self.main_class = ""
        self._parsed = not toolchain.spec.parse_errors
        self.submission_dir = submission_dir
        self.checker: TestChecker | None = None
        self.concealed = [*task_folders(), *(Path(p) for p in settings.sandbox_paths)]
        """Folders every sandboxed run sees that the program and its compile see empty:
        the ``tasks`` folder (tests files) and the operator's paths (grading data)."""

    def close(self) -> None:
        """Let go of what the runner holds outside the session (its input file)."""
        os.close(self._stdin)

    def _environment(self) -> dict[str, str]:
        home = str(self.session.home)
        env = script_env(
            self.session.home, self.session.sandbox.layers.bwrap is not None, own_python=True
        )
        env.update({name: value.replace("{home}", home) for name, value in self.spec.env.items()})
        return env

    def _fill(self, words: tuple[str, ...], source: str) -> list[str]:
        values = {
            **{f"{{{tool}}}": path for tool, path in self.toolchain.paths.items()},
            "{source}": source,
            "{build}": str(self.build_dir),
            "{main}": self.main_class,
            "{memory_mb}": str(self.memory_mb),
        }
        filled = []
        for word in words:
            for name, value in values.items():
                word = word.replace(name, value)
            filled.append(word)
        return filled

    # -- building --------------------------------------------------------------------

    def build(self, source: str) -> Built:
        """Compile ``source`` once (or take its build from the cache) into ``build/``."""
        name = self.spec.source_name
        if self.spec.name == "java":
            self.main_class = java_main_class(source)
            name = f"{self.main_class}.java"
        data = source.encode()
        os.mkdir(self.build_dir, 0o755)
        if self.spec.compile is None:
            (self.build_dir / name).write_bytes(data)
            self._close_home()
            return Built(self._run_argv(name), None)
        key = build_key([self.spec.name, self.toolchain.version, *self.spec.compile, name], data)
        if self.cache is not None and self.cache.restore(key, self.build_dir):
            self._close_home()
            return Built(self._run_argv(name), CompileResult(ok=True, seconds=0.0, cached=True))
        home = self.session.home
        (home / name).write_bytes(data)
        limits = ProcessLimits(
            wall_s=self.settings.compile_wall_s,
            file_size_bytes=self.limits.file_size_mb * MiB,
            memory_bytes=self.settings.compile_memory_mb * MiB,
            processes=self.limits.processes,
            output_bytes=64 * 1024,
            cpu_s=self.settings.compile_cpu_s,
        )
        started = time.monotonic()
        before = self.session.usage().cpu_s
        argv = self._fill(self.spec.compile, name)
        outcome = self.session.run(
            argv,
            cwd=home,
            env=self.env,
            limits=limits,
            python=warm_form(argv, self.settings),  # Python's build is a syntax check only
            conceal=self.concealed,
        )
        seconds = round(time.monotonic() - started, 3)
        after = self.session.usage().cpu_s
        used = after - before if after is not None and before is not None else None
        problem = compile_problem(outcome, limits, used)
        messages = capped(outcome.stderr or outcome.stdout, COMPILER_MESSAGES_SHOWN)
        if problem is None:
            problem = self._keep_outputs()
        self._close_home()
        if problem is not None:
            text = f"{problem}\n{messages}".strip() if messages else problem
            return Built([], CompileResult(ok=False, seconds=seconds, stderr=text))
        if self.cache is not None:
            self.cache.keep(key, self.build_dir, list(self.spec.outputs))
        return Built(self._run_argv(name), CompileResult(ok=True, seconds=seconds, stderr=messages))

    def _keep_outputs(self) -> str | None:
        """Move the build from ``home/`` to ``build/`` (owned by root); why not, if it fails."""
        for output in self.spec.outputs:
            path = self.session.home / output
            if not path.exists() or path.is_symlink():
                return f"the compiler left no {output}"
            try:
                os.rename(path, self.build_dir / output)
            except OSError as exc:
                return f"the build could not be kept: {exc.strerror}"
        count = 0
        for folder, dirs, files in os.walk(self.build_dir):
            for entry in [folder, *(os.path.join(folder, f) for f in files)]:
                os.lchown(entry, 0, 0)
            count += len(files) + len(dirs)
            if count > MAX_FILES:
                return f"the build has more than {MAX_FILES} files"
        return None

    def _close_home(self) -> None:
        """Nothing of the compile stays where runs could write: tests cannot pass notes on.
        Nor in the slot's memory: the files the compile (or an earlier job of the slot)
        left cached there would count in the tests' memory."""
        for folder in (self.session.home, self.session.output_dir):
            shutil.rmtree(folder, ignore_errors=True)
            os.mkdir(folder, 0o755)
        self.session.drop_cached()

    def _run_argv(self, source_name: str) -> list[str]:
        return self._fill(self.spec.run, f"{self.build_dir}/{source_name}")

    # -- running ---------------------------------------------------------------------

    def run_test(self, argv: list[str], case: TestCase) -> TestResult:
        """Run the program on one test; its verdict. A run held back by the machine runs once
        more before its end decides: one still going at the wall-clock cap within its CPU
        limit (the machine was busy, say), or stopped by ``RLIMIT_CPU`` within it (the
        kernel's sampled count ran ahead of the cgroup's exact one)."""
        os.ftruncate(self._stdin, 0)
        os.pwrite(self._stdin, case.stdin.encode(), 0)
        result, outcome, measured, held_back = self._attempt(argv)
        if not self._parsed:  # a language checked as it starts: its first run tells
            if did_not_parse(outcome, self.spec.parse_errors):
                text = capped(outcome.stderr.strip(), COMPILER_MESSAGES_SHOWN)
                raise SourceRejected(
                    CompileResult(ok=False, seconds=measured["wall_s"], stderr=text)
                )
            self._parsed = True
        retried = result is None and held_back
        if retried:
            result, outcome, measured, _ = self._attempt(argv)
        if result is None and outcome.timed_out:
            result = self._wall_verdict(measured, retried)
        elif result is None and stopped_for_cpu(outcome):
            result = self._signalled_verdict(outcome, measured)
        if result is None:
            verdict, detail = self._compare(case, outcome)
            result = TestResult(verdict=verdict, detail=detail, **measured)
        update: dict[str, object] = {"retried": True} if retried else {}
        if self.judge.keep_output:
            kept = self.settings.kept_output_kb * 1024
            update["stdout"] = outcome.output[:kept].decode("utf-8", errors="replace")
            update["stderr"] = outcome.stderr.encode()[:kept].decode("utf-8", errors="replace")
        return result.model_copy(update=update) if update else result

    def _wall_cap(self) -> float:
        """The test's wall-clock cap: the judge's ``wall_limit_s``, or ``wall_cap``'s."""
        return self.judge.wall_limit_s or wall_cap(self.judge.time_limit_s)

    def _attempt(self, argv: list[str]) -> tuple[TestResult | None, ProcessOutcome, Measured, bool]:
        """One run: its verdict when its end decides it (TLE, MLE, RE, OLE), else ``None``
        (its output decides, it reached the wall-clock cap, or ``RLIMIT_CPU`` stopped it
        within its limit); what it used; and, when its end decides nothing, whether the
        machine held it back: starved of CPU (``starved``) at the wall-clock cap, or
        stopped by ``RLIMIT_CPU`` within the limit."""
        judge = self.judge
        self._fresh_run_dir()
        self.session.start_measuring()
        before = self.session.usage()
        limits = ProcessLimits(
            wall_s=self._wall_cap(),
            file_size_bytes=self.limits.file_size_mb * MiB,
            memory_bytes=(self.memory_mb + self.spec.memory_overhead_mb) * MiB,
            processes=self.limits.processes,
            output_bytes=self.settings.output_bytes,
            # Where the cgroup counts CPU time exactly, it decides; the rlimit is a backstop.
            cpu_s=judge.time_limit_s if before.cpu_s is None else cpu_backstop(judge.time_limit_s),
            stdout_bytes=self.settings.program_output_mb * MiB,
        )
        env = {**self.env, "HOME": str(self.run_dir)}
        outcome = self.session.run(
            argv,
            cwd=self.run_dir,
            env=env,
            limits=limits,
            # Warm on servers that preloaded no task package (it conceals their folder).
            python=warm_form(argv, self.settings),
            stdin=Path(f"/proc/self/fd/{self._stdin}"),
            conceal=self.concealed,
        )
        after = self.session.usage()
        cpu = peak = None
        if before.cpu_s is not None and after.cpu_s is not None:
            cpu = round(max(0.0, after.cpu_s - before.cpu_s), 4)
        if after.memory_peak_bytes is not None:
            # Less what the slot holds that is not the run's: its build, and the last run's
            # /tmp, which may still be there as the run starts and gone by its end.
            held = min(before.memory_bytes or 0, after.memory_bytes or 0)
            peak = max(0, after.memory_peak_bytes - held)
        measured: Measured = {
            "cpu_s": cpu,
            "wall_s": round(outcome.duration_s, 4),
            "memory_mb": round(peak / MiB, 2) if peak is not None else None,
            "exit_code": outcome.returncode,
        }
        ending = self._ending_verdict(outcome, cpu)
        if ending is None:
            # A wall limit the judge set is a limit, however busy the machine.
            held_back = stopped_for_cpu(outcome) or (
                outcome.timed_out
                and judge.wall_limit_s is None
                and starved(before, after, outcome.duration_s)
            )
            return None, outcome, measured, held_back
        verdict = TestResult(verdict=ending[0], detail=ending[1], **measured)
        return verdict, outcome, measured, False

    def _ending_verdict(
        self, outcome: ProcessOutcome, cpu: float | None
    ) -> tuple[Verdict, str | None] | None:
        limit = self.judge.time_limit_s
        if outcome.start_error is not None:
            if self.spec.run[0].startswith("{"):  # an interpreter, a JVM: the toolchain's
                raise ToolchainUnusable(outcome.start_error)
            return Verdict.RUNTIME_ERROR, outcome.start_error
        if outcome.memory_exceeded:
            return Verdict.MEMORY_LIMIT, f"killed at the memory limit ({self.memory_mb} MiB)"
        if cpu is not None and cpu > limit:
            return Verdict.TIME_LIMIT, f"used {cpu:.2f} s of CPU, over the limit of {limit:g} s"
        if stopped_for_cpu(outcome):
            if cpu is None:  # no exact count: the rlimit is the limit
                return Verdict.TIME_LIMIT, f"stopped at its CPU time limit of {limit:g} s"
            return None  # within the limit by the exact count: the caller runs it again
        if outcome.timed_out:
            return None  # the caller runs it again, then decides
        code = outcome.returncode
        if outcome.output_exceeded:
            return Verdict.OUTPUT_LIMIT, f"wrote more than {self.settings.program_output_mb} MiB"
        if code != 0:
            marker = self.spec.out_of_memory
            if marker is not None and marker in outcome.stderr:
                return Verdict.MEMORY_LIMIT, f"ran out of memory ({marker})"
            return Verdict.RUNTIME_ERROR, runtime_error(outcome)
        return None

    def _wall_verdict(self, measured: Measured, retried: bool) -> TestResult:
        cap = self._wall_cap()
        cpu = measured["cpu_s"]
        used = f" having used {cpu:.2f} s of CPU" if isinstance(cpu, float) else ""
        if self.judge.wall_limit_s is not None:
            return TestResult(
                verdict=Verdict.TIME_LIMIT,
                detail=f"still running at its wall-clock limit ({cap:g} s){used}",
                **measured,
            )
        if retried:
            why = "twice: the machine was too busy to give it its CPU time"
        else:
            why = "without waiting for a CPU: it waits for something (sleep, input)"
        return TestResult(
            verdict=Verdict.TIME_LIMIT,
            detail=f"still running at the wall-clock cap ({cap:g} s){used}, {why}",
            **measured,
        )

    def _signalled_verdict(self, outcome: ProcessOutcome, measured: Measured) -> TestResult:
        """A run stopped by ``SIGXCPU`` twice within its limit by the exact count: not a TLE
        (it did not use the time), most likely a program that sent the signal itself."""
        cpu = measured["cpu_s"]
        used = f"{cpu:.2f} s" if isinstance(cpu, float) else "less"
        return TestResult(
            verdict=Verdict.RUNTIME_ERROR,
            detail=(
                f"{runtime_error(outcome)} twice, having used {used} of CPU, within the "
                f"limit of {self.judge.time_limit_s:g} s"
            ),
            **measured,
        )

    def _fresh_run_dir(self) -> None:
        shutil.rmtree(self.run_dir, ignore_errors=True)
        os.mkdir(self.run_dir, 0o755)  # the run's set-up enters it before it is the slot's user
        slot = self.session.slot
        if slot is not None:
            os.chown(self.run_dir, slot.uid, slot.gid)

    def _compare(self, case: TestCase, outcome: ProcessOutcome) -> tuple[Verdict, str | None]:
        compare = self.judge.compare
        if isinstance(compare, Checker):
            shutil.rmtree(self.run_dir, ignore_errors=True)  # room for the checker's files
            if self.checker is None:
                setting = CheckerSetting(self.settings, self.limits, self.env, self.submission_dir)
                self.checker = TestChecker(self.session, compare, setting)
            return self.checker.verdict(case, outcome.output)
        if case.stdout is None:  # nothing expected: a run that ended well is accepted
            return Verdict.ACCEPTED, None
        return compare_outputs(outcome.output, case.stdout.encode(), compare)

    # -- checking --------------------------------------------------------------------
