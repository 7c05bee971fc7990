"""``chalk worker --processes N``: Celery workers in N processes, started and stopped together.

A worker process runs its Python (Celery's consumer, the regex, custom and rubric
judges) on one core. With the threads pool, ``chalk worker`` therefore starts one
worker process per core it may use, unless told otherwise (``--processes N`` or
``CHALK_WORKER_PROCESSES``; another pool starts one, as it has processes of its own).
With one process, ``chalk worker`` becomes that Celery worker, as before. With
more, it stays as their parent:

- each process is a ``celery worker`` of its own, named ``NAME-1@HOST``, ``NAME-2@HOST``,
  ... (``chalk health`` and Flower list each), holding its share of ``--concurrency``
  (64 jobs shared by two processes: 32 each), serving its metrics on
  ``CHALK_METRICS_PORT`` + its index - 1;
- SIGTERM, SIGINT (Ctrl+C) and SIGQUIT to the parent go to every process, once
  each, so a second SIGTERM stops them at once, as it stops one worker; SIGHUP is
  passed on too (Celery restarts in place on it), and the parent goes on;
- a process that dies while nobody asked it to stop is started again a second
  later; one that dies within ``EARLY_S`` of its start twice in a row stops them all
  (its error is in the log) and the parent exits with its code;
- if the parent itself is killed, the processes are sent SIGTERM (and finish their jobs);
- ``--pidfile`` names the parent; ``--detach``, ``--beat`` and ``--statedb`` are
  refused (they need one process).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType

from chalk_client.cores import PROCESSES_ENV, usable_cores
from chalk_client.errors import ConfigurationError

EARLY_S = 10.0
"""A process that dies this soon after its start, twice in a row, stops them all."""
RESTART_S = 1.0
"""The wait before a process that died is started again."""
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP)
ONE_PROCESS_ONLY = ("-D", "--detach", "-B", "--beat", "-S", "--statedb")
"""Celery options that cannot be given to several processes at once."""
_PR_SET_PDEATHSIG = 1


def option_value(args: list[str], names: tuple[str, ...]) -> tuple[str | None, list[str]]:
    """The value of the last ``--name V``/``--name=V``/``-nV`` among ``args``, and the
    arguments without it."""
    value, rest, index = None, [], 0
    while index < len(args):
        arg = args[index]
        index += 1
        name, equals, attached = arg.partition("=")
        if name in names:
            if equals:
                value = attached
            elif index < len(args):
                value = args[index]
                index += 1
            else:
                raise ConfigurationError(f"{arg} needs a value, e.g. {arg} 2")
            continue
        short = next((n for n in names if len(n) == 2 and arg.startswith(n) and arg != n), None)
        if short is not None and not arg.startswith("--"):
            value = arg[len(short) :]
            continue
        rest.append(arg)
    return value, rest


def take_processes(args: Sequence[str], pool: str | None) -> tuple[int, list[str]]:
    """How many worker processes ``chalk worker ARGS`` starts, and ``ARGS`` without
    ``--processes``. ``pool``: the ``--pool`` given (``None``: the threads pool)."""
    given, rest = option_value(list(args), ("--processes",))
    if given is None:
        given = os.environ.get(PROCESSES_ENV) or "auto"
    if given == "auto":
        count = usable_cores() if pool in (None, "threads") else 1
    else:
        try:
            count = int(given)
        except ValueError:
            count = 0
        if count < 1:
            raise ConfigurationError(
                f"--processes takes a whole number of at least 1, or auto (one per core "
                f"with the threads pool), not {given!r}"
            )
    return count, rest


def child_name(name: str | None, index: int) -> str:
    """Process ``index``'s Celery node name: ``NAME-index@HOST`` from ``NAME@HOST``."""
    base = name or "celery@%h"
    local, at, host = base.partition("@")
    return f"{local}-{index}{at}{host}"


@dataclass
class Child:
    """One worker process: its command line and environment, and its latest run."""

    index: int
    argv: list[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    early_deaths: int = 0


@dataclass
class Supervisor:
    """The parent of ``chalk worker``'s processes."""

    children: list[Child]
    pidfile: str | None = None
    stopping: bool = False
    exit_code: int = 0

    def run(self) -> int:
        for sig in FORWARDED:
            signal.signal(sig, self._on_signal)
        if self.pidfile:
            with open(self.pidfile, "w") as out:
                out.write(f"{os.getpid()}\n")
        try:
            for child in self.children:
                if not self.stopping:  # a signal during the starts stops the rest
                    self._start(child)
            while any(child.proc is not None for child in self.children):
                self._reap(self._wait())
        finally:
            if self.pidfile:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.pidfile)
        return self.exit_code

    def _start(self, child: Child) -> None:
        # A signal arriving while the process starts waits until it is known here, then
        # reaches it with the others (the child unblocks them before its exec).
        signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        try:
            child.proc = subprocess.Popen(
                child.argv,
                env=child.env,
                start_new_session=True,
                preexec_fn=functools.partial(_end_with_parent, os.getpid()),
            )
            child.started = time.monotonic()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)

    def _wait(self) -> tuple[int, int]:
        while True:
            try:
                return os.waitpid(-1, 0)
            except ChildProcessError:
                return (0, 0)

    def _reap(self, waited: tuple[int, int]) -> None:
        pid, status = waited
        child = next((c for c in self.children if c.proc is not None and c.proc.pid == pid), None)
        if child is None:
            if pid == 0:  # nothing left to wait for
                for each in self.children:
                    each.proc = None
            return
        assert child.proc is not None
        code = os.waitstatus_to_exitcode(status)
        code = 128 - code if code < 0 else code  # killed by a signal: the shell's number
        child.proc.returncode = code
        child.proc = None
        if self.stopping:
            self.exit_code = max(self.exit_code, code)
            return
        early = time.monotonic() - child.started < EARLY_S
        child.early_deaths = child.early_deaths + 1 if early else 0
        if child.early_deaths >= 2:
            print(
                f"chalk worker: process {child.index} exited with code {code} twice within "
                f"{EARLY_S:g} s of its start; stopping the others (its log says why)",
                file=sys.stderr,
                flush=True,
            )
            self.exit_code = code or 1
            self._stop(signal.SIGTERM)
            return
        print(
            f"chalk worker: process {child.index} (pid {pid}) exited with code {code}; "
            f"starting it again in {RESTART_S:g} s (its jobs go to the others once their "
            "leases lapse)",
            file=sys.stderr,
            flush=True,
        )
        time.sleep(RESTART_S)
        if not self.stopping:
            self._start(child)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:  # Celery restarts on it, in place: passed on only
            self._send(signum)
        else:
            self._stop(signum)

    def _stop(self, signum: int) -> None:
        self.stopping = True
        self._send(signum)

    def _send(self, signum: int) -> None:
        for child in self.children:
            if child.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.proc.pid, signum)


def _end_with_parent(parent: int) -> None:
    # In the child, before its exec: the parent's handlers go (a signal now ends it),
    # then the signals the parent blocked around the start come through. Should the
    # parent die without passing a signal on, the process is sent SIGTERM (it finishes
    # its jobs and exits), never left running on its own.
    for sig in FORWARDED:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the call above
        os._exit(1)


def supervise(argv: list[str], count: int, concurrency: int) -> int:
    """Run ``argv`` (a ``celery worker`` command line) as ``count`` processes sharing
    ``concurrency`` slots; returns the exit code for ``chalk worker``."""
    name, rest = option_value(argv, ("-n", "--hostname"))
    pidfile, rest = option_value(rest, ("--pidfile",))
    _, rest = option_value(rest, ("-c", "--concurrency"))
    single = [arg for arg in rest if arg.partition("=")[0] in ONE_PROCESS_ONLY]
    if single:
        raise ConfigurationError(
            f"chalk worker {single[0]} needs one process: add --processes 1 (and run chalk "
            "worker under a process manager, systemd, supervisord or Docker, to keep it up)"
        )
    port = os.environ.get("CHALK_METRICS_PORT")
    if port and port.isdigit() and int(port) + count - 1 > 65535:
        raise ConfigurationError(
            f"CHALK_METRICS_PORT={port} leaves no port for each of the {count} processes "
            f"(they serve on {port} to {int(port) + count - 1}): choose a lower port"
        )
    children = []
    shares = [concurrency // count + (1 if n < concurrency % count else 0) for n in range(count)]
    for index, share in enumerate(shares, start=1):
        env = {**os.environ, PROCESSES_ENV: str(count)}
        if port and port.isdigit():
            env["CHALK_METRICS_PORT"] = str(int(port) + index - 1)
        child_argv = [*rest, "--concurrency", str(share), "-n", child_name(name, index)]
        children.append(Child(index, child_argv, env))
    host = socket.gethostname()
    names = ", ".join(child_name(name, c.index).replace("%h", host) for c in children)
    slots = f"{shares[0]} slots each" if len(set(shares)) == 1 else f"{concurrency} slots in all"
    print(
        f"chalk worker: {count} worker processes, {slots} ({names}); --processes 1 runs one",
        file=sys.stderr,
        flush=True,
    )
    return Supervisor(children, pidfile=pidfile).run()
