"""Starting, watching and capturing one contained process.

The pieces runs are assembled from (``direct``, ``served``): the limits and
outcome of a run, a pipe drained into a capped buffer, the child-side set-up
between ``fork`` and ``exec`` (cgroups, rlimits, dropping to the slot user),
and a last-resort sweep by environment token for machines with no better way
to find leftovers.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import math
import os
import resource
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from io import BufferedReader
from pathlib import Path
from typing import Literal

from chalk_worker.sandbox.syscalls import clear_user_keyring

TOKEN_VARIABLE = "CHALK_SANDBOX_TOKEN"
_PR_SET_NO_NEW_PRIVS = 38


@dataclass(frozen=True)
class ProcessLimits:
    """Resource limits for one run."""

    wall_s: float
    """Wall-clock seconds before the whole run is killed."""
    file_size_bytes: int
    """Largest file the script may write; also the size of its scratch space."""
    memory_bytes: int = 2048 * 1024 * 1024
    """Memory of the whole process tree (where a memory cgroup exists)."""
    processes: int = 256
    """Processes at once (pids cgroup, or RLIMIT_NPROC on the slot's uid)."""
    open_files: int = 1024
    output_bytes: int = 64 * 1024
    """Bytes of stdout and of stderr kept."""
    cpu_s: float | None = None
    """CPU seconds of each process (``RLIMIT_CPU``, whole seconds, rounded up); ``None``:
    the wall-clock limit's worth and five more."""
    stdout_bytes: int | None = None
    """Stdout kept up to this many bytes, and the run ended when it writes more
    (``output_exceeded``); ``None``: kept up to ``output_bytes``, the rest counted."""

    @property
    def cpu_rlimit(self) -> tuple[int, int]:
        """The ``RLIMIT_CPU`` of a run: soft (SIGXCPU), hard (SIGKILL)."""
        soft = int(self.wall_s) + 5 if self.cpu_s is None else max(1, math.ceil(self.cpu_s))
        return soft, soft + 1


StartedHow = Literal["warm", "forked", "direct"]
"""How a run started: forked from a warm interpreter, executed from a fork server, or
directly (its own bubblewrap, or none)."""


@dataclass(frozen=True)
class ProcessOutcome:
    """What happened to one run.

    ``returncode`` is ``None`` when the command could not start
    (``start_error`` says why); a negative code is the signal that ended it.
    ``maybe_signal``: the code is 128 + N as bubblewrap reports a child killed by
    signal N, which a child exiting with that status cannot be told apart from.
    """

    returncode: int | None
    timed_out: bool
    stdout: str
    stderr: str
    duration_s: float
    start_error: str | None = None
    memory_exceeded: bool = False
    leftovers_killed: int = 0
    maybe_signal: bool = False
    started: StartedHow = "direct"
    """How the run started: ``warm`` (forked interpreter), ``forked`` (executed from a
    fork server) or ``direct`` (its own bubblewrap, or none)."""
    output: bytes = b""
    """Stdout's kept bytes, undecoded."""
    output_exceeded: bool = False
    """It wrote more than ``ProcessLimits.stdout_bytes`` and was ended for it."""


class CappedBuffer:
    """The first ``limit`` bytes of a stream, and a count of the rest.

    ``overflow`` is called (once) when a byte beyond ``limit`` comes.
    """

    def __init__(self, limit: int, overflow: Callable[[], object] | None = None) -> None:
        self.limit = limit
        self.kept = bytearray()
        self.dropped = 0
        self.overflow = overflow

    def feed(self, chunk: bytes) -> None:
        """Keep what fits of ``chunk``; count the rest."""
        room = self.limit - len(self.kept)
        if room > 0:
            self.kept += chunk[:room]
        extra = max(0, len(chunk) - max(room, 0))
        if extra and not self.dropped and self.overflow is not None:
            self.overflow()
        self.dropped += extra

    def text(self, shown: int | None = None) -> str:
        """What was kept (its first ``shown`` bytes), decoded, with a note of the rest."""
        kept = self.kept if shown is None or shown >= len(self.kept) else self.kept[:shown]
        text = kept.decode("utf-8", errors="replace")
        rest = self.dropped + len(self.kept) - len(kept)
        if rest:
            text += f"\n[... {rest} more bytes not kept]"
        return text


class Capture:
    """Drain a pipe in a thread, keeping only its first ``limit`` bytes."""

    def __init__(
        self, pipe: BufferedReader, limit: int, overflow: Callable[[], object] | None = None
    ) -> None:
        self.buffer = CappedBuffer(limit, overflow)
        self._pipe = pipe
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        with self._pipe:
            while chunk := self._pipe.read1(65536):
                self.buffer.feed(chunk)

    def text(self, wait_s: float, shown: int | None = None) -> str:
        """What was kept (its first ``shown`` bytes), decoded, with a note of the rest."""
        self._thread.join(wait_s)
        return self.buffer.text(shown)


def start_error(program: str, error: int | None, reason: str) -> str:
    """What a run whose ``program`` could not start says: ``reason`` and, for a permission
    refused, what of the program's is closed to other users (scripts run as one)."""
    said = f"could not start {program!r}: {reason}"
    why = _closed_to_others(program) if error == errno.EACCES else None
    return f"{said}: {why}" if why else said


def _closed_to_others(program: str) -> str | None:
    """The folder on the way to ``program`` (or its link's target) that other users cannot
    enter, or the program itself if they cannot run it: a Python under a home of mode 0700."""
    if not os.path.isabs(program):
        return None
    real = Path(os.path.realpath(program))
    for folder in [*reversed(Path(program).parents), *reversed(real.parents)]:
        try:
            mode = folder.stat().st_mode & 0o777
        except OSError:
            return None
        if not mode & 0o001:
            return (
                f"the folder {folder} on its way is closed to other users (mode {mode:o}) "
                "and scripts run as an unprivileged user; let others enter it (chmod o+x) "
                "or install the program where others can"
            )
    try:
        mode = real.stat().st_mode & 0o777
    except OSError:
        return None
    if not mode & 0o001:
        return (
            f"other users may not run it (mode {mode:o}) and scripts run as an unprivileged "
            "user; chmod o+rx it"
        )
    return None


def child_setup(
    limits: ProcessLimits, cgroup_fds: Sequence[int], uid: int | None, drop_here: bool
) -> Callable[[], None]:
    """What the child does between ``fork`` and ``exec``.

    Join the slot's cgroups first (so nothing it starts can be outside them),
    set rlimits, empty the slot uid's kernel keyring (it outlives processes: an
    earlier script could have left a key there), then, when bubblewrap is not
    doing it, become the slot user with no groups and ``no_new_privs``. Only
    plain system calls: the worker has threads, and the child must not take a
    lock one of them holds.
    """
    cpu_rlimit = limits.cpu_rlimit
    libc = ctypes.CDLL(None, use_errno=True) if drop_here else None

    def prepare() -> None:
        pid = str(os.getpid()).encode()
        for fd in cgroup_fds:
            os.write(fd, pid)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_size_bytes,) * 2)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files,) * 2)
        resource.setrlimit(resource.RLIMIT_CPU, cpu_rlimit)
        if uid is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes,) * 2)
            # The keyring is the real uid's: be the slot user for a moment (saved uid 0).
            os.setresuid(uid, uid, 0)
            clear_user_keyring()
            os.setresuid(0, 0, 0)
        if drop_here and uid is not None and libc is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                os._exit(126)

    return prepare


def carrying_token(token: str) -> list[int]:
    """Processes whose environment holds this run's token."""
    marker = f"{TOKEN_VARIABLE}={token}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{entry.name}/environ", "rb") as env:
                if marker in env.read():
                    found.append(int(entry.name))
    return found


def sweep(find: Callable[[], list[int]], sweeps: int = 50) -> int:
    """SIGKILL what ``find`` returns until it returns nothing; count the kills."""
    killed = 0
    for _ in range(sweeps):
        pids = [pid for pid in find() if pid != os.getpid()]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        time.sleep(0.002)
    return killed


def wait_exit(process: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait for ``process`` to exit, at most ``timeout_s``; ``False`` if it is still running.

    Sleeps on a pidfd, so it wakes the moment the process exits (``Popen.wait``
    with a timeout polls, which costs up to 50 ms a run).
    """
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True
    try:
        ready, _, _ = select.select([pidfd], [], [], timeout_s)
    finally:
        os.close(pidfd)
    return bool(ready)


def kill_group(pgid: int) -> None:
    """SIGKILL a process group, if it still exists."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
