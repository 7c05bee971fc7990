"""``TestsJudge``: build the student's program once, run it on each test case, compare.

Everything runs in one sandbox session (``programs.runner``): the compile (or
the build cache's copy), then each test with its input on stdin, its CPU time
and memory counted by the slot's cgroups. The step's score is the fraction of
tests accepted (or all or nothing); its ``tests`` and ``compile`` say what
happened to each. A worker without the language's toolchain, a tests file it
cannot read and a checker that misbehaves are the grader's failures (a zero
marked ``grader_error``), never the student's.
"""

from __future__ import annotations

import time
from collections import Counter

from chalk_client.judge_specs import TestsJudge
from chalk_client.program_tests import Checker
from chalk_client.scoring import CompileResult, Scoring, TestResult, Verdict, ZeroCause
from chalk_worker.judges.base import JudgeContext, evaluator
from chalk_worker.judges.executable import script_threads
from chalk_worker.judges.programs.builds import BuildCache
from chalk_worker.judges.programs.cases import TestsFileError, test_cases
from chalk_worker.judges.programs.checker import CheckerFailed
from chalk_worker.judges.programs.languages import toolchains
from chalk_worker.judges.programs.outcomes import SourceRejected, ToolchainUnusable
from chalk_worker.judges.programs.runner import ProgramRunner
from chalk_worker.judges.programs.source import NoProgram, find_program
from chalk_worker.sandbox.policy import check_command
from chalk_worker.sandbox.workdirs import make_job_folder, work_root

GRADER_ERROR = ZeroCause.GRADER_ERROR
MiB = 1024 * 1024
BUILD_CACHE = "chalk-builds"
"""The build cache's folder, beside the job folders."""


def _count(judge: TestsJudge, context: JudgeContext) -> int:
    return sum(1 for _ in test_cases(judge, context.submission_dir))


def _scoring(
    judge: TestsJudge, language: str, results: list[TestResult], compiled: CompileResult | None
) -> Scoring:
    passed = sum(r.verdict is Verdict.ACCEPTED for r in results)
    total = len(results)
    if total == 0:
        return Scoring.fail("error", "the tests file holds no test case", cause=GRADER_ERROR)
    score = passed / total if judge.scoring == "fraction" else float(passed == total)
    counts = Counter(r.verdict.value for r in results)
    metadata = {
        "language": language,
        "passed": f"{passed}/{total}",
        "verdicts": ", ".join(f"{v}: {n}" for v, n in counts.most_common()),
    }
    failed = next(
        ((n, r) for n, r in enumerate(results, 1) if r.verdict is not Verdict.ACCEPTED), None
    )
    if failed is not None:
        number, result = failed
        note = f" ({result.detail})" if result.detail else ""
        metadata["first_failure"] = f"test {number}: {result.verdict.value}{note}"
    cause = None
    if compiled is not None and not compiled.ok:
        cause = ZeroCause.COMPILE_ERROR
        metadata["compile"] = compiled.stderr
    elif score == 0:
        cause = ZeroCause.FAILED_TESTS
    return Scoring(
        score=score,
        metadata=metadata,
        continue_task=passed == total,
        cause=cause,
        tests=results,
        compile=compiled,
    )


def _not_built(judge: TestsJudge, context: JudgeContext, language: str, why: str) -> Scoring:
    total = _count(judge, context)
    results = [TestResult(verdict=Verdict.COMPILE_ERROR) for _ in range(total)]
    return _scoring(judge, language, results, CompileResult(ok=False, seconds=0.0, stderr=why))


def _judge(judge: TestsJudge, context: JudgeContext) -> Scoring:
    """Build and run the program in one sandbox session; its verdict (blocking)."""
    from chalk_worker.sandbox.session import get_sandbox

    try:
        program = find_program(judge, context.transcript, context.submission_dir)
    except NoProgram as exc:
        return _not_built(judge, context, judge.language, str(exc))
    chains = toolchains()
    toolchain = chains.found.get(program.language)
    if toolchain is None:
        return Scoring.fail(
            "error",
            f"this worker cannot run {program.language} programs: "
            f"{chains.missing.get(program.language, 'no toolchain')}",
            cause=GRADER_ERROR,
        )
    settings = context.settings
    file_bytes = context.limits.file_size_mb * MiB
    sandbox = get_sandbox(settings)
    make_job_folder(context.job_dir, sandbox.can_mount, file_bytes)
    root = work_root(settings)
    cache = BuildCache(root / BUILD_CACHE, settings.build_cache_mb * MiB)
    with sandbox.session(context.job_dir, file_bytes, root) as session:
        runner = ProgramRunner(
            session, toolchain, judge, settings, context.limits, cache, context.submission_dir
        )
        try:
            built = runner.build(program.source)
            if built.result is not None and not built.result.ok:
                total = _count(judge, context)
                results = [TestResult(verdict=Verdict.COMPILE_ERROR) for _ in range(total)]
                return _scoring(judge, program.language, results, built.result)
            results = []
            cases = test_cases(judge, context.submission_dir)
            for case in cases:
                result = runner.run_test(built.argv, case)
                results.append(result)
                if judge.stop_at_first_failure and result.verdict is not Verdict.ACCEPTED:
                    skipped = sum(1 for _ in cases)
                    results += [TestResult(verdict=Verdict.SKIPPED)] * skipped
                    break
        except SourceRejected as exc:
            results = [
                TestResult(verdict=Verdict.COMPILE_ERROR) for _ in range(_count(judge, context))
            ]
            return _scoring(judge, program.language, results, exc.result)
        except CheckerFailed as exc:
            return Scoring.fail("error", str(exc), cause=GRADER_ERROR)
        except ToolchainUnusable as exc:
            return Scoring.fail(
                "error",
                f"this worker's {program.language} toolchain could not run in the sandbox: {exc} "
                "(install it where the sandbox shows it: /usr, or CHALK_SANDBOX_PATHS)",
                cause=GRADER_ERROR,
            )
        finally:
            runner.close()
    return _scoring(judge, program.language, results, built.result)


@evaluator("tests")
async def evaluate_tests(judge: TestsJudge, context: JudgeContext) -> Scoring:
    """Build the program and run it on the judge's tests, sandboxed; one verdict per test."""
    if isinstance(judge.compare, Checker):
        check_command(judge.compare.checker, context.settings.allowed_commands)
    queued = time.perf_counter()

    def run() -> Scoring:
        if context.waits is not None:  # a slot is free: the wait for one ends here
            context.waits.sandbox_s += time.perf_counter() - queued
            context.waits.sandbox_runs += 1
        try:
            return _judge(judge, context)
        except TestsFileError as exc:
            return Scoring.fail("error", str(exc), cause=GRADER_ERROR)

    return await script_threads().run(run)
