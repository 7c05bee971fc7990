"""The worker's side of the fork servers: starting them, sending runs, replacing the dead.

A ``ForkServer`` is one server process (see ``forkserver``) and the worker's end
of its socket. ``ForkServerPool`` keeps this process's idle servers (at most
one per run that can be in flight) and starts one when none is idle. A server
that cannot be started, or that dies, raises ``ForkServerLost``: the caller
runs the command the old way (bubblewrap per run) and the pool starts a new
server next time. Servers that keep failing to start turn the pool off, with a
warning in the log.
"""

from __future__ import annotations

import array
import contextlib
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from chalk_worker.sandbox import forkserver, syscalls
from chalk_worker.sandbox.bwrap import render_bwrap, view_entries
from chalk_worker.sandbox.environment import script_env
from chalk_worker.sandbox.runroot import STAGE
from chalk_worker.sandbox.warm import preload_modules, preloaded_files
from chalk_worker.sandbox.wire import RunRequest, ServerSetup, ViewEntry

log = logging.getLogger(__name__)

SERVER_SCRIPT = Path(forkserver.__file__).resolve()
START_TIMEOUT_S = 60.0
"""How long a server may take to start and import its modules."""
REPLY_TIMEOUT_S = 30.0
"""How long a server may take to answer about a run's start (its set-up is milliseconds)."""
STARTS_BEFORE_GIVING_UP = 3
"""Failed starts in a row after which this process stops using fork servers."""


class ForkServerLost(Exception):
    """Raised when a fork server could not be started, or died or hung during a run."""


@dataclass(frozen=True)
class ServerConfig:
    """What every server of a pool is made with."""

    bwrap: str
    server_view: list[ViewEntry]
    """The server's own root (the run view, plus the server's code)."""
    run_view: list[ViewEntry]
    """What each run's root is built from."""
    env: dict[str, str]
    """The server's environment: a script's, without the per-run variables."""
    preload: list[str]
    """Modules to import before serving; empty for cold-only servers."""
    warm: bool
    watched: tuple[str, ...] = ()
    """Files whose change on disk makes a server stale (the preloaded task packages)."""


@dataclass(frozen=True)
class ServerReply:
    """How a run went, as the server saw it."""

    start: str
    """``""`` when the program ran; else ``cold: ...``, ``exec: errno`` or ``setup: ...``."""
    status: int
    """The program's wait status."""


class ForkServer:
    """One fork server process; used by one run at a time."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.warm = False
        self.signature = file_signature(config.watched)
        """The watched files as they were when this server started."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        self.sock = ours
        self._spare: socket.socket | None = None
        """The socket of the process the server prepared for the next run, once received."""
        argv = render_bwrap(config.bwrap, config.server_view, chdir=Path("/"))
        argv += [sys.executable, str(SERVER_SCRIPT), str(theirs.fileno())]
        try:
            self.process = subprocess.Popen(
                argv,
                env=config.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=[theirs.fileno()],
                start_new_session=True,
            )
        except OSError as exc:
            ours.close()
            raise ForkServerLost(f"could not start bubblewrap: {exc}") from exc
        finally:
            theirs.close()
        assert self.process.stderr is not None
        threading.Thread(
            target=_relay_log,
            args=(self.process.stderr,),
            name="chalk-fork-server-log",
            daemon=True,
        ).start()
        try:
            setup: ServerSetup = {
                "view": [list(entry) for entry in config.run_view],
                "preload": config.preload,
                "warm": config.warm,
            }
            ours.send(_json(setup))
            ready = self._reply(START_TIMEOUT_S)
        except ForkServerLost:
            self.close()
            raise
        self.warm = bool(ready.get("warm"))
        if config.warm and ready.get("note"):
            log.warning("fork server: %s", ready["note"])

    @property
    def alive(self) -> bool:
        """Whether the server process still runs."""
        return self.process.poll() is None

    def _reply(self, timeout_s: float) -> dict[str, object]:
        message, _ = self._receive(timeout_s)
        return message

    def _receive(self, timeout_s: float) -> tuple[dict[str, object], list[int]]:
        ready, _, _ = select.select([self.sock], [], [], max(timeout_s, 0))
        if not ready:
            raise ForkServerLost(f"the fork server did not answer within {timeout_s:.0f} s")
        fds = array.array("i")
        try:
            data, ancillary, _, _ = self.sock.recvmsg(65536, socket.CMSG_SPACE(4 * fds.itemsize))
        except OSError as exc:
            raise ForkServerLost(f"the fork server's socket failed: {exc}") from exc
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        if not data:
            raise ForkServerLost("the fork server exited")
        message = json.loads(data)
        if not isinstance(message, dict):
            raise ForkServerLost(f"the fork server sent {message!r:.200}, not a JSON object")
        return message, list(fds)

    def _take_spare(self) -> socket.socket:
        """The socket of the server's spare process, which the next run is sent to."""
        if self._spare is None:
            message, fds = self._receive(REPLY_TIMEOUT_S)
            if message.get("spare") is not True or len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                raise ForkServerLost(f"the fork server sent {message} where a spare was due")
            self._spare = socket.socket(fileno=fds[0])
        spare, self._spare = self._spare, None
        return spare

    def start_run(self, request: RunRequest, fds: Sequence[int]) -> None:
        """Send one run, straight to the server's spare process: the request and its descriptors.

        The descriptors are the stdout and stderr pipes' write ends, the cgroup
        files, then the detached mounts, in the request's order. The server
        reports the run's end on its own socket.
        """
        spare = self._take_spare()
        body = os.memfd_create("chalk-run", os.MFD_CLOEXEC)
        try:
            os.write(body, _json(request))
            ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [body, *fds]))]
            spare.sendmsg([b"run"], ancillary)
        except Exception as exc:  # the spare is told nothing: the server ends, not reused
            raise ForkServerLost(f"could not send the run to the fork server: {exc}") from exc
        finally:
            os.close(body)
            spare.close()

    def finished(self) -> ServerReply:
        """The server's report of a run (call once its socket is readable)."""
        message = self._reply(REPLY_TIMEOUT_S)
        end = str(message.get("end", ""))
        if "start" not in message or not end.lstrip("-").isdigit():
            raise ForkServerLost(f"the fork server sent a report it should not: {message}")
        return ServerReply(start=str(message["start"]), status=int(end))

    @property
    def socket_fd(self) -> int:
        """The socket, to wait on beside the run's pipes."""
        return self.sock.fileno()

    def close(self) -> None:
        """Stop the server (closing its sockets ends it), or kill it if it does not stop."""
        for sock in (self.sock, self._spare):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()
        try:
            self.process.wait(2)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def _json(value: object) -> bytes:
    return json.dumps(value).encode()


def server_config(
    bwrap: str,
    readonly_roots: Sequence[Path],
    *,
    warm: bool,
    own_python: bool = True,
    tasks: bool = True,
) -> ServerConfig:
    """The configuration of a sandbox's fork servers: warm (modules imported) or cold.

    Runs see the allowlisted paths; the server sees its own code as well.
    ``own_python``: the server's Python starts as a ``{python}`` script's would
    (``script_env``); false where an allowlisted path lies beside the packages.
    ``tasks``: a warm server imports the task packages too (false: the standard
    modules only, for runs that must not reach the graders' code or data).
    """
    run_view = view_entries(readonly=readonly_roots, writable=[], tmp_bytes=1 << 20)
    server_view = view_entries(
        readonly=[*readonly_roots, SERVER_SCRIPT.parent], writable=[], tmp_bytes=1 << 20
    )
    preload = preload_modules(with_tasks=tasks) if warm else []
    return ServerConfig(
        bwrap=bwrap,
        server_view=[*server_view, ("dir", STAGE, "")],
        run_view=run_view,
        env=script_env(Path("/"), isolated=True, own_python=own_python),
        preload=preload,
        warm=warm,
        watched=tuple(preloaded_files(preload)),
    )


def file_signature(paths: Sequence[str]) -> tuple[int, ...]:
    """Modification times and sizes of ``paths`` (0 for a missing one)."""
    found: list[int] = []
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            found += [0, 0]
            continue
        found += [info.st_mtime_ns, info.st_size]
    return tuple(found)


def _relay_log(stream: IO[bytes]) -> None:
    with stream:
        for line in stream:
            text = line.decode(errors="replace").rstrip()
            if text:
                log.warning("fork server: %s", text)


class ForkServerPool:
    """This process's fork servers for one sandbox configuration."""

    def __init__(self, config: ServerConfig, max_idle: int) -> None:
        self.config = config
        self.max_idle = max_idle
        self._idle: list[ForkServer] = []
        self._lock = threading.Lock()
        self._failures = 0
        self.started = 0
        """Servers this pool started so far (a replaced one counts again)."""
        self.disabled_because = ""
        """Why this pool no longer starts servers ("" while it does)."""

    @contextlib.contextmanager
    def server(self) -> Iterator[ForkServer | None]:
        """An idle server (started if needed) for one run, or ``None`` when servers are off.

        Give it back by leaving the block; one that died, or that raised
        ``ForkServerLost`` out of the block, is stopped, not reused.
        """
        server = self._take()
        try:
            yield server
        except ForkServerLost:
            if server is not None:
                server.close()
                server = None
            raise
        finally:
            if server is not None:
                self._give_back(server)

    def _take(self) -> ForkServer | None:
        current = file_signature(self.config.watched) if self.config.watched else ()
        with self._lock:
            if self.disabled_because:
                return None
            while self._idle:
                server = self._idle.pop()
                if server.alive and server.signature == current:
                    return server
                server.close()  # dead, or started before a preloaded file changed
        try:
            server = ForkServer(self.config)
        except ForkServerLost as exc:
            with self._lock:
                self._failures += 1
                if self._failures >= STARTS_BEFORE_GIVING_UP and not self.disabled_because:
                    self.disabled_because = str(exc)
                    log.warning(
                        "fork servers are off in this process (%s); each script now starts its "
                        "own bubblewrap sandbox, which is slower",
                        exc,
                    )
            log.warning("could not start a fork server: %s", exc)
            return None
        with self._lock:
            self._failures = 0
            self.started += 1
        return server

    def _give_back(self, server: ForkServer) -> None:
        with self._lock:
            if server.alive and len(self._idle) < self.max_idle and not self.disabled_because:
                self._idle.append(server)
                return
        server.close()

    def close(self) -> None:
        """Stop every idle server."""
        with self._lock:
            idle, self._idle = self._idle, []
        for server in idle:
            server.close()


def wait_status_code(status: int) -> int:
    """A wait status as ``Popen.returncode`` puts it: the exit code, or minus the signal."""
    return os.waitstatus_to_exitcode(status)


def detached_mounts(paths: Sequence[tuple[Path, bool]]) -> list[int]:
    """Detached copies of each ``(path, read_only)``, restricted, for a run's root."""
    fds: list[int] = []
    try:
        for path, readonly in paths:
            fd = syscalls.open_tree_clone(str(path))
            fds.append(fd)
            syscalls.restrict_mount(fd, readonly)
    except OSError:
        for fd in fds:
            os.close(fd)
        raise
    return fds


def monotonic_left(deadline: float) -> float:
    """Seconds left until ``deadline`` (``time.monotonic`` based), never negative."""
    return max(0.0, deadline - time.monotonic())
