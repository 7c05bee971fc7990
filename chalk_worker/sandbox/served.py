"""One command run through a fork server: the request, the pipes, the clock and the kill.

``run_served`` sends the run, drains stdout and stderr into capped buffers
while it waits for the server's reports, kills the run's PID namespace (and
the slot's cgroup) at the wall-clock limit, and turns what happened into a
``ProcessOutcome``. It returns ``None`` when a warm run was refused (the
command must run cold), and raises ``ForkServerLost`` when the server failed:
the caller then runs the command again, the old way.
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from chalk_worker.sandbox.cgroups import SlotCgroups
from chalk_worker.sandbox.process import (
    CappedBuffer,
    ProcessLimits,
    ProcessOutcome,
    start_error,
    sweep,
)
from chalk_worker.sandbox.pycommand import PythonCommand
from chalk_worker.sandbox.servers import (
    ForkServer,
    ForkServerLost,
    ServerReply,
    detached_mounts,
    wait_status_code,
)
from chalk_worker.sandbox.slots import Slot, processes_of
from chalk_worker.sandbox.wire import RunRequest

KILLED_RUN_REPORT_S = 10.0
"""How long a server may take to report the end of a run it was told to kill."""
DRAIN_AFTER_END_S = 5.0
"""How long the pipes may stay open after the run ended (nothing of it is alive by then)."""


def _rlimits(limits: ProcessLimits) -> list[tuple[int, int, int]]:
    """The rlimits of a run, as the cold path's ``child_setup`` sets them."""
    return [
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_FSIZE, limits.file_size_bytes, limits.file_size_bytes),
        (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
        (resource.RLIMIT_CPU, *limits.cpu_rlimit),
        (resource.RLIMIT_NPROC, limits.processes, limits.processes),
    ]


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@dataclass(frozen=True)
class RunSpec:
    """One command to run in a slot, and what it may see."""

    argv: Sequence[str]
    cwd: Path
    env: dict[str, str]
    limits: ProcessLimits
    slot: Slot
    cgroups: SlotCgroups | None
    mounts: Sequence[tuple[Path, bool]]
    """The run's own paths, ``(path, read_only)``: the submission, the scratch folder,
    the paths the command names."""
    hide: Path | None = None
    """A folder shown empty (a fresh tmpfs) under the run's own paths inside it."""
    stdin: Path | None = None
    """A file the command reads as its stdin (``None``: empty). Opened by the worker:
    the run needs no view of it."""
    conceal: Sequence[Path] = ()
    """Folders of the server's view the run sees empty (where none of its paths lies)."""


def run_served(
    server: ForkServer, spec: RunSpec, python: PythonCommand | None
) -> ProcessOutcome | None:
    """Run ``spec`` on ``server`` (warm when ``python`` is given); ``None`` if refused warm."""
    started = time.monotonic()
    argv, cwd, limits, cgroups = spec.argv, spec.cwd, spec.limits, spec.cgroups
    present = sorted(
        ((path, readonly) for path, readonly in spec.mounts if path.exists()),
        key=lambda item: len(item[0].parts),
    )
    request: RunRequest = {
        "argv": list(argv),
        # bubblewrap's --chdir sets PWD for the cold run; so does this.
        "env": [*spec.env.items(), ("PWD", str(cwd))],
        "cwd": str(cwd),
        "umask": _current_umask(),
        "uid": spec.slot.uid,
        "gid": spec.slot.gid,
        "rlimits": _rlimits(limits),
        "tmp_bytes": limits.file_size_bytes,
        "mounts": [str(path) for path, _ in present],
        "hide": str(spec.hide) if spec.hide is not None else None,
        "cgroups": 0,
        "python": python.to_json() if python is not None else None,
        "stdin": spec.stdin is not None,
        "conceal": [str(path) for path in spec.conceal],
    }
    oom_before = 0
    if cgroups is not None:
        cgroups.prepare(limits.memory_bytes, limits.processes)
        oom_before = cgroups.oom_kills()
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    sent = [out_w, err_w]
    own = len(sent)  # the pipes' ends and stdin: closed here once sent
    try:
        if spec.stdin is not None:
            sent.append(os.open(spec.stdin, os.O_RDONLY | os.O_CLOEXEC))
            own = len(sent)
        if cgroups is not None:
            sent += cgroups.open_for_join()
            request["cgroups"] = len(sent) - own
        sent += detached_mounts(present)
        server.start_run(request, sent)
    except BaseException:
        os.close(out_r)
        os.close(err_r)
        raise
    finally:
        for fd in sent[:own] + sent[own + request["cgroups"] :]:
            os.close(fd)
        if cgroups is not None:
            cgroups.close_join()
    watch = _Watch(server, out_r, err_r, limits)
    reply, timed_out = watch.follow(started + limits.wall_s, spec.slot, cgroups)
    start, status = reply.start, reply.status
    if start.startswith("cold:"):
        return None
    if start.startswith("setup:"):
        raise ForkServerLost(f"the run's set-up failed: {start[6:].strip()}")
    if start.startswith("exec:"):
        errno = int(start[5:].strip() or 0)
        return ProcessOutcome(
            returncode=None,
            timed_out=False,
            stdout=watch.out.text(limits.output_bytes),
            stderr=watch.err.text(),
            duration_s=time.monotonic() - started,
            start_error=start_error(argv[0], errno, os.strerror(errno)),
            started="forked",
        )
    return ProcessOutcome(
        returncode=wait_status_code(status),
        timed_out=timed_out,
        stdout=watch.out.text(limits.output_bytes),
        stderr=watch.err.text(),
        duration_s=time.monotonic() - started,
        memory_exceeded=cgroups is not None and cgroups.oom_kills() > oom_before,
        started="warm" if python is not None else "forked",
        output=bytes(watch.out.kept),
        output_exceeded=watch.overflowed,
    )


class _Watch:
    """Follows one run: drains its pipes, reads the server's reports, enforces the clock."""

    slot: Slot
    cgroups: SlotCgroups | None = None

    def __init__(self, server: ForkServer, out_r: int, err_r: int, limits: ProcessLimits) -> None:
        self.server = server
        self.overflowed = False
        """Stdout went past ``limits.stdout_bytes``: the run is ended at once."""
        if limits.stdout_bytes is None:
            self.out = CappedBuffer(limits.output_bytes)
        else:
            self.out = CappedBuffer(limits.stdout_bytes, overflow=self._overflow)
        self.err = CappedBuffer(limits.output_bytes)
        self.pipes = {out_r: self.out, err_r: self.err}
        self.poll = select.poll()
        for fd in (out_r, err_r, server.socket_fd):
            self.poll.register(fd, select.POLLIN)

    def _drain(self, fd: int) -> None:
        chunk = os.read(fd, 65536)
        if chunk:
            self.pipes[fd].feed(chunk)
            return
        self.poll.unregister(fd)
        del self.pipes[fd]
        os.close(fd)

    def follow(
        self, deadline: float, slot: Slot, cgroups: SlotCgroups | None
    ) -> tuple[ServerReply, bool]:
        """Until the run ended and its pipes closed: the server's report, and if it timed out.

        At the deadline the run is killed through the slot (its cgroup, every
        process of its uid); the server then reports its end.
        """
        reply: ServerReply | None = None
        timed_out = False
        self.slot, self.cgroups = slot, cgroups
        try:
            while reply is None or self.pipes:
                wait_s = deadline - time.monotonic()
                ready = self.poll.poll(max(0, int(wait_s * 1000) + 1))
                if not ready and time.monotonic() >= deadline:
                    if reply is not None:
                        break  # pipes held open past the end: nothing of the run lives now
                    if timed_out:
                        raise ForkServerLost("the fork server did not report a killed run's end")
                    timed_out = True
                    if cgroups is not None:
                        cgroups.kill_all()
                    sweep(lambda: processes_of(slot.uid))
                    deadline = time.monotonic() + KILLED_RUN_REPORT_S
                    continue
                for fd, _ in ready:
                    if fd in self.pipes:
                        self._drain(fd)
                    elif reply is None:
                        reply = self.server.finished()
                        deadline = time.monotonic() + DRAIN_AFTER_END_S
                        self.poll.unregister(self.server.socket_fd)
        finally:
            for fd in list(self.pipes):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self.pipes.clear()
        assert reply is not None
        return reply, timed_out

    def _overflow(self) -> None:
        """End the run: it wrote more than it may (its report comes as for any end)."""
        self.overflowed = True
        if self.cgroups is not None and self.cgroups.kill_all():
            return
        sweep(lambda: processes_of(self.slot.uid))
