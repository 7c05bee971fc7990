"""``ExecutableJudge``: run a scoring script in the sandbox and read the score it writes."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import json
import logging
import math
import os
import queue
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, TypeVar

from chalk_client.cores import cores_per_process
from chalk_client.errors import CommandRefusedError
from chalk_client.judge_specs import ExecutableJudge
from chalk_client.scoring import Scoring, ZeroCause
from chalk_worker.judges.base import JudgeContext, evaluator
from chalk_worker.judges.hooks import HOOKS
from chalk_worker.sandbox.bwrap import beside_packages
from chalk_worker.sandbox.environment import script_env
from chalk_worker.sandbox.policy import check_command
from chalk_worker.sandbox.process import ProcessLimits, ProcessOutcome
from chalk_worker.sandbox.pycommand import parse_python_command
from chalk_worker.sandbox.workdirs import make_job_folder, work_root

if TYPE_CHECKING:
    from chalk_worker.sandbox.session import SandboxSession

log = logging.getLogger(__name__)
GRADER_ERROR = ZeroCause.GRADER_ERROR
MAX_OUTPUT_FILE_BYTES = 16 * 1024 * 1024
"""A score file larger than this is not read (scores are small JSON objects)."""

_T = TypeVar("_T")


def subprocess_slots() -> int:
    """How many subprocess judges one worker process runs at once: one per core of its
    share (``chalk worker`` with several processes shares the cores among them)."""
    return cores_per_process()


class ScriptThreads:
    """The threads that run scoring scripts: at most ``size``, each call handed straight back.

    ``loop.run_in_executor`` chains a ``concurrent.futures`` future to the loop's
    (a condition, two callbacks, a second pass of the loop); here the thread
    that ran the call puts its outcome on the loop itself, which saves about
    0.09 ms between a script's end and its verdict. A call whose caller was
    cancelled before a thread took it is skipped; one already running goes to
    its end (its sandbox is cleaned up as always) and its outcome is dropped.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._calls: queue.SimpleQueue[tuple[asyncio.Future[Any], Callable[[], Any]]] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0

    async def run(self, call: Callable[[], _T]) -> _T:
        """``call()`` in one of the threads, awaited on the running loop."""
        future: asyncio.Future[_T] = asyncio.get_running_loop().create_future()
        with self._lock:
            if self._idle:
                self._idle -= 1
                number = None
            elif self._threads < self._size:
                number = self._threads
                self._threads += 1
            else:
                number = None  # every thread is busy: the call waits for the first free one
        if number is not None:
            self._start(number)
        # The call runs in the caller's context: the job's stop switch goes with it.
        self._calls.put((future, functools.partial(contextvars.copy_context().run, call)))
        return await future

    def _start(self, number: int) -> None:
        """Start thread ``number``; where none can start (the process is at its limit of
        threads, say), the call waits for a running one, or fails if none runs."""
        try:
            thread = threading.Thread(
                target=self._serve, name=f"chalk-sandbox_{number}", daemon=True
            )
            thread.start()
        except RuntimeError:
            with self._lock:
                self._threads -= 1
                if self._threads == 0:
                    raise
            log.warning("could not start a thread for scoring scripts: a running one takes it")

    def _serve(self) -> None:
        while True:
            future, call = self._calls.get()
            if not future.cancelled():  # else its job ended while it waited: not run
                try:
                    outcome, error = call(), None
                except BaseException as exc:  # handed to the caller, as run_in_executor does
                    outcome, error = None, exc
                with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                    future.get_loop().call_soon_threadsafe(_settle, future, outcome, error)
                del outcome, error
            del future, call
            with self._lock:
                self._idle += 1


def _settle(future: asyncio.Future[Any], outcome: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(outcome)


_threads: tuple[int, ScriptThreads] | None = None
_threads_lock = threading.Lock()


def script_threads() -> ScriptThreads:
    """This process's script threads, made after any fork (threads do not survive one)."""
    global _threads
    with _threads_lock:
        if _threads is None or _threads[0] != os.getpid():
            _threads = (os.getpid(), ScriptThreads(subprocess_slots()))
        return _threads[1]


def _fill(word: str, context: JudgeContext) -> str:
    if "{submission}" in word:
        first = str(context.saved_submissions[0]) if context.saved_submissions else ""
        word = word.replace("{submission}", first)
    return word.replace("{submission_dir}", str(context.submission_dir)).replace(
        "{python}", sys.executable
    )


def _read_up_to(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes of ``fd``, to its end."""
    chunks = []
    left = limit
    while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read_score_file(path: Path) -> tuple[dict[str, object] | None, str]:
    """The script's JSON object, or ``None`` and why not. Never follows links or FIFOs."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None, f"the script did not write its output file {path.name}"
    except OSError as exc:
        return None, f"the output file {path.name} could not be opened: {exc.strerror}"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, f"the output file {path.name} is not a regular file"
        if info.st_size > MAX_OUTPUT_FILE_BYTES:
            return None, f"the output file is {info.st_size} bytes, over {MAX_OUTPUT_FILE_BYTES}"
        raw = _read_up_to(fd, MAX_OUTPUT_FILE_BYTES + 1)
    finally:
        os.close(fd)
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"the output file is not valid JSON: {exc}"
    except RecursionError:
        return None, "the output file's JSON is nested too deeply to read"
    if not isinstance(data, dict) or "score" not in data or "metadata" not in data:
        return None, 'the output file must hold a JSON object with both "score" and "metadata"'
    return data, ""


def _verdict(
    outcome: ProcessOutcome, output: Path, judge: ExecutableJudge, memory_mb: int
) -> Scoring:
    captured = {"stdout": outcome.stdout, "stderr": outcome.stderr}
    if outcome.start_error is not None:
        return Scoring.fail("error", outcome.start_error, cause=GRADER_ERROR, **captured)
    if outcome.timed_out:
        return Scoring.fail(
            "error",
            f"the script timed out after {outcome.duration_s:.1f} s",
            cause=ZeroCause.TIMEOUT,
            **captured,
        )
    if outcome.returncode != 0:
        # A script that exits 0 is judged by its file, even if a child of it (the
        # student's program, say) ran out of memory and the script handled that.
        if outcome.memory_exceeded:
            why = f"ran out of memory (limit {memory_mb} MiB)"
            cause = ZeroCause.OUT_OF_MEMORY
        else:
            why, cause = _ending(outcome), GRADER_ERROR
        return Scoring.fail("error", f"the script {why}", cause=cause, **captured)
    data, problem = _read_score_file(output)
    if data is None:
        return Scoring.fail("error", problem, cause=GRADER_ERROR, **captured)
    score, metadata = data["score"], data["metadata"]
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not _finite(score):
        return Scoring.fail(
            "error",
            f'"score" must be a finite number, got {_short(score)}',
            cause=GRADER_ERROR,
            **captured,
        )
    if not isinstance(metadata, dict):
        return Scoring.fail(
            "error",
            f'"metadata" must be an object, got {_short(metadata)}',
            cause=GRADER_ERROR,
            **captured,
        )
    return Scoring(
        score=float(score),
        metadata={**metadata, **captured},
        continue_task=score >= judge.continue_threshold,
        cause=ZeroCause.SCRIPT_ZERO if score == 0 else None,
    )


def _ending(outcome: ProcessOutcome) -> str:
    """How a script that did not exit 0 ended, in words."""
    code = outcome.returncode or 0
    if code < 0:
        return f"was killed by signal {-code} ({_signal_name(-code)})"
    if outcome.maybe_signal:
        # Under bubblewrap a script killed by signal N and one that exits 128 + N look alike.
        number = code - 128
        return (
            f"exited with status {code} (also what a script killed by signal {number}, "
            f"{_signal_name(number)}, reports)"
        )
    return f"exited with status {code}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _finite(score: float) -> bool:
    try:
        return math.isfinite(score)
    except OverflowError:  # an integer too large for a float
        return False


def _short(value: object) -> str:
    """At most 80 characters of ``value``'s repr, even for a huge integer."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of {len(str(abs(value)))} digits"
    return f"{value!r:.80}"


def _within(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or inside it, links resolved."""
    resolved, root = path.resolve(), folder.resolve()
    return resolved == root or root in resolved.parents


def named_paths(words: list[str], session: SandboxSession, shown: list[Path]) -> list[Path]:
    """Absolute host paths the job's command names (its script, a data folder, ``cwd``).

    The job's author chose them, not the student, so they are shown read-only;
    their own permissions still apply to the slot user.
    """
    named: list[Path] = []
    for word in words:
        if not word.startswith("/"):
            continue
        path = Path(word)
        if path.exists() and not session.visible(path, [*shown, *named]):
            named.append(path)
    return named


def _judge(judge: ExecutableJudge, context: JudgeContext) -> Scoring:
    """Run the script in a sandbox session and read its verdict (blocking)."""
    # The sandbox's machinery is loaded by the first script, not by every process.
    from chalk_worker.sandbox.session import get_sandbox

    limits = ProcessLimits(
        wall_s=min(judge.timeout_s or context.limits.wall_s, context.settings.max_wall_s),
        file_size_bytes=context.limits.file_size_mb * 1024 * 1024,
        memory_bytes=context.limits.memory_mb * 1024 * 1024,
        processes=context.limits.processes,
        output_bytes=context.limits.output_bytes,
    )
    sandbox = get_sandbox(context.settings)
    # Made here when the job had nothing to unpack: in this process's in-memory folder,
    # or as a tmpfs of its own where there is none and scratch spaces are mounted.
    make_job_folder(context.job_dir, sandbox.can_mount, limits.file_size_bytes)
    with sandbox.session(
        context.job_dir, limits.file_size_bytes, work_root(context.settings)
    ) as session:
        output = session.output_dir / PurePosixPath(judge.command[-1]).name
        argv = [_fill(word, context) for word in judge.command[:-1]] + [str(output)]
        cwd = Path(_fill(judge.cwd, context)) if judge.cwd else session.home
        readonly = [context.submission_dir]
        if not cwd.is_dir():
            return Scoring.fail(
                "error", f"the working directory {cwd} does not exist", cause=GRADER_ERROR
            )
        if context.settings.allowed_commands and _within(cwd, context.submission_dir):
            # There, the student's files would be found first: `python -m tasks.x` would
            # import a `tasks` package from the submission, `./grade.sh` would be theirs.
            raise CommandRefusedError(
                f"the working directory {cwd} is inside the student's submission, where "
                "the student's files would run in place of the commands CHALK_ALLOWED_COMMANDS "
                "allows; leave cwd unset and pass {submission_dir} to the command instead"
            )
        if context.settings.sandbox_named_paths:
            readonly += named_paths([*argv[:-1], str(cwd)], session, readonly)
        if not session.visible(cwd, readonly):
            return Scoring.fail(
                "error",
                f"the working directory {cwd} is not visible inside the sandbox; use a folder "
                "under {submission_dir} or one listed in CHALK_SANDBOX_PATHS",
                cause=GRADER_ERROR,
            )
        if session.slot is not None and cwd.stat().st_mode & 0o005 != 0o005:
            return Scoring.fail(
                "error",
                f"the working directory {cwd} is closed to other users (mode "
                f"{cwd.stat().st_mode & 0o777:o}) and scripts run as an unprivileged user; "
                "make it readable and searchable by others (chmod o+rx)",
                cause=GRADER_ERROR,
            )
        is_python = judge.command[0] == "{python}"
        # The paths shown beyond the submission: the allowlist, those the command names.
        shown: list[str | Path] = [*context.settings.sandbox_paths, *readonly[1:]]
        own_python = is_python and not beside_packages(shown)
        env = script_env(session.home, sandbox.layers.bwrap is not None, own_python)
        warm = is_python and context.settings.warm_python
        outcome = session.run(
            argv,
            cwd=cwd,
            env=env,
            limits=limits,
            readonly=readonly,
            python=parse_python_command(argv) if warm else None,
        )
        HOOKS.sandbox_run(outcome)
        return _verdict(outcome, output, judge, context.limits.memory_mb)


@evaluator("executable")
async def evaluate_executable(judge: ExecutableJudge, context: JudgeContext) -> Scoring:
    """Run the scoring script sandboxed; its output file decides the verdict."""
    check_command(judge.command, context.settings.allowed_commands)
    uses_submission = any("{submission}" in word for word in judge.command)
    if uses_submission and not context.saved_submissions:
        return Scoring.fail(
            "error",
            "the command uses {submission} but the step has no submission file",
            cause=GRADER_ERROR,
        )
    queued = time.perf_counter()

    def run() -> Scoring:
        if context.waits is not None:  # a slot is free: the wait for one ends here
            context.waits.sandbox_s += time.perf_counter() - queued
            context.waits.sandbox_runs += 1
        return _judge(judge, context)

    return await script_threads().run(run)
