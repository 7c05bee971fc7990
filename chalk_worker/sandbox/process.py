"""Run one untrusted command and leave nothing of it behind.

``run_sandboxed`` starts the command in its own session, with rlimits and an
empty stdin, captures at most ``output_bytes`` of stdout and stderr each,
enforces a wall-clock timeout, and when the command ends (or is timed out)
kills *every* process it started, also those that left its process group
(``setsid``, double forks): through a cgroup's ``cgroup.kill`` where the
machine lets us create cgroups, and through a sweep of processes carrying the
run's token in their environment otherwise.
"""

from __future__ import annotations

import logging
import os
import resource
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from io import BufferedReader
from pathlib import Path

log = logging.getLogger(__name__)

TOKEN_VARIABLE = "CHALK_SANDBOX_TOKEN"
_CGROUP2_ROOTS = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))
_KILL_SWEEPS = 50


@dataclass(frozen=True)
class ProcessLimits:
    """Resource limits for one run."""

    wall_s: float
    file_size_bytes: int
    open_files: int = 1024
    output_bytes: int = 64 * 1024


@dataclass(frozen=True)
class ProcessOutcome:
    """What happened to one run.

    ``returncode`` is ``None`` when the command could not start
    (``start_error`` says why); a negative code is the signal that ended it.
    """

    returncode: int | None
    timed_out: bool
    stdout: str
    stderr: str
    duration_s: float
    start_error: str | None = None
    leftovers_killed: int = 0


class _Capture:
    """Drain a pipe in a thread, keeping only its first ``limit`` bytes."""

    def __init__(self, pipe: BufferedReader, limit: int) -> None:
        self.limit = limit
        self.kept = bytearray()
        self.dropped = 0
        self._pipe = pipe
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        with self._pipe:
            while chunk := self._pipe.read1(65536):
                room = self.limit - len(self.kept)
                if room > 0:
                    self.kept += chunk[:room]
                self.dropped += max(0, len(chunk) - max(room, 0))

    def text(self, wait_s: float) -> str:
        self._thread.join(wait_s)
        text = self.kept.decode("utf-8", errors="replace")
        if self.dropped:
            text += f"\n[... {self.dropped} more bytes not kept]"
        return text


class _KillGroup:
    """A cgroup v2 group whose ``cgroup.kill`` ends every process in it at once."""

    _root: Path | None = None
    _probed = False

    @classmethod
    def root(cls) -> Path | None:
        if not cls._probed:
            cls._probed = True
            for base in _CGROUP2_ROOTS:
                if not (base / "cgroup.controllers").exists():
                    continue  # not a cgroup v2 mount
                candidate = base / "chalk"
                try:
                    candidate.mkdir(exist_ok=True)
                    probe = candidate / f"probe-{os.getpid()}"
                    probe.mkdir()
                    usable = (probe / "cgroup.kill").exists()
                    probe.rmdir()
                except OSError:
                    continue
                if usable:
                    cls._root = candidate
                    break
            if cls._root is None:
                log.warning(
                    "cgroup v2 with cgroup.kill is not writable here: leftover processes are "
                    "found by an environment sweep instead, which a hostile script can evade"
                )
        return cls._root

    def __init__(self, token: str) -> None:
        root = self.root()
        self.path = None if root is None else root / token
        self.procs_fd: int | None = None
        if self.path is not None:
            try:
                self.path.mkdir()
                self.procs_fd = os.open(self.path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
            except OSError as exc:
                log.warning("could not create cgroup %s (%s); using the sweep only", self.path, exc)
                self.path = None

    def kill(self) -> bool:
        if self.path is None:
            return False
        try:
            (self.path / "cgroup.kill").write_text("1")
        except OSError:
            return False
        return True

    def remove(self) -> None:
        if self.procs_fd is not None:
            os.close(self.procs_fd)
            self.procs_fd = None
        if self.path is None:
            return
        for _ in range(200):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                self.kill()
                time.sleep(0.005)
        log.warning("cgroup %s could not be removed: processes are still in it", self.path)


def _preexec(limits: ProcessLimits, procs_fd: int | None) -> Callable[[], None]:
    # Runs in the child between fork and exec: only async-signal-safe-ish os calls.
    cpu_s = int(limits.wall_s) + 5

    def prepare() -> None:
        if procs_fd is not None:
            os.write(procs_fd, str(os.getpid()).encode())
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_size_bytes, limits.file_size_bytes))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))

    return prepare


def _carrying_token(token: str) -> list[int]:
    marker = f"{TOKEN_VARIABLE}={token}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as environ:
                if marker in environ.read():
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def _kill_everything(pgid: int, group: _KillGroup, token: str) -> int:
    """Kill the process group, then the cgroup or every process carrying the token.

    Returns how many leftover processes the sweep killed (0 when the cgroup did it).
    """
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    except PermissionError:
        log.warning("could not kill process group %d", pgid)
    if group.kill():
        return 0
    killed = 0
    for _ in range(_KILL_SWEEPS):
        pids = [pid for pid in _carrying_token(token) if pid != os.getpid()]
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        time.sleep(0.002)
    return killed


def run_sandboxed(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str],
    limits: ProcessLimits,
) -> ProcessOutcome:
    """Run ``argv`` contained, wait for it (at most ``limits.wall_s``), then kill all it left."""
    token = secrets.token_hex(12)
    env = {**env, TOKEN_VARIABLE: token}
    group = _KillGroup(token)
    started = time.monotonic()
    try:
        process = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
            preexec_fn=_preexec(limits, group.procs_fd),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        group.remove()
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return ProcessOutcome(
            returncode=None,
            timed_out=False,
            stdout="",
            stderr="",
            duration_s=time.monotonic() - started,
            start_error=f"could not start {argv[0]!r}: {reason}",
        )
    assert process.stdout is not None and process.stderr is not None
    out = _Capture(process.stdout, limits.output_bytes)  # type: ignore[arg-type]
    err = _Capture(process.stderr, limits.output_bytes)  # type: ignore[arg-type]
    timed_out = False
    try:
        process.wait(timeout=limits.wall_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        leftovers = _kill_everything(process.pid, group, token)
        process.wait()
        group.remove()
    duration = time.monotonic() - started
    return ProcessOutcome(
        returncode=process.returncode,
        timed_out=timed_out,
        stdout=out.text(wait_s=5.0),
        stderr=err.text(wait_s=5.0),
        duration_s=duration,
        leftovers_killed=leftovers,
    )
