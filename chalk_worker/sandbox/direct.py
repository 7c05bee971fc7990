"""One command run in a sandbox of its own: bubblewrap started by this process.

The way every run started before the fork servers, and the way one still starts
where the machine has no servers, or when a server died during the run.
``run_direct`` wraps the command in bubblewrap (and ``setpriv``, to become the
slot's user) where the machine has them, starts it in the slot's cgroups with
rlimits and an empty stdin, captures its capped output, and kills it at the
wall-clock limit. ``kill_everything`` then ends all the run left behind; the
session calls it after a run on a fork server too.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from chalk_worker.sandbox.bwrap import bwrap_argv
from chalk_worker.sandbox.cgroups import SlotCgroups
from chalk_worker.sandbox.probe import SandboxLayers
from chalk_worker.sandbox.process import (
    TOKEN_VARIABLE,
    Capture,
    ProcessLimits,
    ProcessOutcome,
    carrying_token,
    child_setup,
    kill_group,
    start_error,
    sweep,
    wait_exit,
)
from chalk_worker.sandbox.slots import Slot, processes_of


def run_direct(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str],
    limits: ProcessLimits,
    layers: SandboxLayers,
    readonly: Sequence[Path],
    scratch: Path,
    slot: Slot | None,
    cgroups: SlotCgroups | None,
    hide: Path | None = None,
    stdin: Path | None = None,
    conceal: Sequence[Path] = (),
) -> ProcessOutcome:
    """Run ``argv`` in a sandbox of its own and wait for it; kill all it left behind.

    ``env`` carries the run's token (``TOKEN_VARIABLE``). Under bubblewrap the
    run sees ``readonly`` (the allowlisted paths and the job's own) and may
    write only to ``scratch``; ``slot`` is the user it runs as, ``cgroups`` the
    groups that hold it, where the machine has them. ``stdin``: a file it
    reads as stdin (opened here), else it reads nothing.
    """
    started = time.monotonic()
    token = env[TOKEN_VARIABLE]
    uid = slot.uid if slot else None
    full = list(argv)
    popen_cwd: Path | None = cwd
    if layers.bwrap:
        full = _wrap(
            full,
            layers,
            cwd=cwd,
            limits=limits,
            readonly=readonly,
            scratch=scratch,
            slot=slot,
            hide=hide,
            conceal=conceal,
        )
        popen_cwd = None
    oom_before = 0
    if cgroups is not None:
        cgroups.prepare(limits.memory_bytes, limits.processes)
        oom_before = cgroups.oom_kills()
    fds = cgroups.open_for_join() if cgroups is not None else []
    stdin_file = None
    try:
        stdin_file = open(stdin, "rb") if stdin is not None else None  # noqa: SIM115
        process = subprocess.Popen(
            full,
            cwd=popen_cwd,
            env=env,
            stdin=stdin_file if stdin_file is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
            preexec_fn=child_setup(limits, fds, uid, drop_here=not layers.bwrap),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        error = exc.errno if isinstance(exc, OSError) else None
        return ProcessOutcome(
            returncode=None,
            timed_out=False,
            stdout="",
            stderr="",
            duration_s=time.monotonic() - started,
            start_error=start_error(argv[0], error, reason),
        )
    finally:
        if cgroups is not None:
            cgroups.close_join()
        if stdin_file is not None:
            stdin_file.close()
    assert process.stdout is not None and process.stderr is not None
    overflowed = threading.Event()

    def overflow() -> None:  # stdout past its cap: the run ends here (OLE)
        overflowed.set()
        kill_everything(process.pid, cgroups, uid, None if layers.bwrap else token)

    if limits.stdout_bytes is None:
        out = Capture(process.stdout, limits.output_bytes)  # type: ignore[arg-type]
    else:
        out = Capture(process.stdout, limits.stdout_bytes, overflow)  # type: ignore[arg-type]
    err = Capture(process.stderr, limits.output_bytes)  # type: ignore[arg-type]
    timed_out = not wait_exit(process, limits.wall_s)
    leftovers = kill_everything(process.pid, cgroups, uid, None if layers.bwrap else token)
    process.wait()
    memory_exceeded = cgroups is not None and cgroups.oom_kills() > oom_before
    returncode = process.returncode
    return ProcessOutcome(
        returncode=returncode,
        # bubblewrap reports a child killed by signal N as exit status 128 + N.
        maybe_signal=bool(layers.bwrap) and 128 < returncode <= 128 + 64,
        timed_out=timed_out,
        stdout=out.text(wait_s=5.0, shown=limits.output_bytes),
        stderr=err.text(wait_s=5.0),
        duration_s=time.monotonic() - started,
        memory_exceeded=memory_exceeded,
        leftovers_killed=leftovers,
        output=bytes(out.buffer.kept),
        output_exceeded=overflowed.is_set(),
    )


def _wrap(
    argv: list[str],
    layers: SandboxLayers,
    *,
    cwd: Path,
    limits: ProcessLimits,
    readonly: Sequence[Path],
    scratch: Path,
    slot: Slot | None,
    hide: Path | None,
    conceal: Sequence[Path],
) -> list[str]:
    """``argv`` inside bubblewrap, run as the slot's user where ``setpriv`` is there."""
    assert layers.bwrap is not None
    command = bwrap_argv(
        layers.bwrap,
        readonly=readonly,
        writable=[scratch],
        chdir=cwd,
        tmp_bytes=limits.file_size_bytes,
        hide=hide,
        conceal=conceal,
    )
    if slot is not None and layers.setpriv:
        command += [
            layers.setpriv,
            f"--reuid={slot.uid}",
            f"--regid={slot.gid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
        ]
    return command + argv


def kill_everything(
    pgid: int, cgroups: SlotCgroups | None, uid: int | None, token: str | None
) -> int:
    """Kill all a run left behind; the number of processes a sweep had to kill.

    ``pgid``: the run's process group (0 for none). ``token``: the run's
    environment token, to find its processes by where nothing better can (no
    slot user); ``None`` where bubblewrap's PID namespace held them.
    """
    # Killing bubblewrap's process group ends its PID namespace, and with it
    # everything inside; the cgroup and uid sweeps catch anything else.
    if pgid:
        kill_group(pgid)
    if cgroups is not None and cgroups.empty_all():
        return 0
    if uid is not None:
        return sweep(lambda: processes_of(uid))
    if token is not None:
        return sweep(lambda: carrying_token(token))
    return 0
