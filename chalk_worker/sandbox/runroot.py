"""The root folder of a run on a fork server: planned once, built ahead, finished per job.

A run's root is made at ``STAGE``, in the mount namespace of the run's own
process. ``plan_root`` turns the server's view into steps once per server;
``build_root`` executes them in each spare process, before any job is known (a
private ``/tmp``, a ``/proc`` that lists only the run's processes, the
allowlisted paths); ``finish_root`` adds the job's part when
the request comes (the sizes of its ``/tmp``, its submission, scratch and named
paths, handed over as detached mounts), then chroots into it.

Standard library only: the fork server loads this file by path (``_sibling``)
and gives it ``syscalls``, loaded the same way, before its code runs.
"""

import codecs
import contextlib
import os
import stat
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from chalk_worker.sandbox import syscalls
    from chalk_worker.sandbox.wire import RunRequest, ViewEntry

STAGE = "/.chalk-run"
"""Where a run builds its root (a folder of the server's view)."""

Action = Literal["mkdir", "touch", "bind", "symlink", "proc", "tmpfs"]
"""What one step of making a run's root does (``build_root`` says how)."""

Step = tuple[Action, str, str]
"""One step of making a run's root, decided once per server: ``(action, path, detail)``."""


def plan_root(view: "list[ViewEntry]") -> list[Step]:
    """The steps that make a run's root from the server's view, paths under ``STAGE``.

    Every check (is it a folder? bound already with the folder above it?) is made
    here, once: a run's process, a fork, then only executes them.
    """
    steps: list[Step] = []
    bound: list[str] = []
    for kind, path, detail in view:
        target = STAGE + path
        if kind == "symlink":
            steps.append(("symlink", target, detail))
        elif kind == "dir":
            steps.append(("mkdir", target, ""))
        elif kind in ("ro", "rw"):
            if any(path.startswith(f"{done}/") for done in bound):
                continue  # comes with the recursive bind of a folder above it
            steps.append(("mkdir" if os.path.isdir(path) else "touch", target, ""))
            steps.append(("bind", target, path))
            bound.append(path)
        elif kind == "proc":
            # bubblewrap also binds /proc/sys, /proc/irq... read-only again: it may run its
            # command as root of a user namespace. A run here has no capability at all.
            steps += [("mkdir", target, ""), ("proc", target, "")]
        elif kind == "dev":
            steps += [("mkdir", target, ""), ("bind", target, "/dev")]
        elif kind == "tmpfs":
            steps += [("mkdir", target, ""), ("tmpfs", target, "")]
    return steps


def build_root(plan: list[Step]) -> None:
    """Make the part of a run's root that does not depend on the job, at ``STAGE``.

    In the (spare) run process's own mount namespace; ``finish_root`` adds the
    job's part when the request comes.
    """
    flags = syscalls.MS_NOSUID | syscalls.MS_NODEV
    syscalls.mount(None, "/", None, syscalls.MS_REC | syscalls.MS_PRIVATE)
    syscalls.mount("tmpfs", STAGE, "tmpfs", flags)
    os.chmod(STAGE, 0o755)
    for action, target, detail in plan:
        if action == "mkdir":
            os.mkdir(target, 0o755)
        elif action == "bind":
            syscalls.mount(detail, target, None, syscalls.MS_BIND | syscalls.MS_REC)
        elif action == "symlink":
            os.symlink(detail, target)
        elif action == "touch":
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
        elif action == "proc":
            # Processes of other users (the server, the sandbox's init) are not even listed.
            proc_flags = flags | syscalls.MS_NOEXEC
            syscalls.mount("proc", target, "proc", proc_flags, "hidepid=invisible")
        elif action == "tmpfs":  # its size is the run's: set again by finish_root
            # Sticky and open to all, as a /tmp is: the run's own, its user writes there.
            syscalls.mount("tmpfs", target, "tmpfs", flags, "mode=1777,size=1m")


def prefault_finish_root() -> None:
    """Call, with no effect, the library functions ``finish_root`` calls (in a spare, while
    idle: their pages are then copied already when the request comes; see the server's
    ``_prefault_request_path``)."""
    os.path.lexists(STAGE + "/.chalk-none")
    os.makedirs(STAGE, 0o755, exist_ok=True)
    stat.S_ISDIR(os.stat(STAGE).st_mode)


def _hide(target: str) -> None:
    """Show the folder ``target`` empty (where it is shown at all): first unmount what a
    recursive bind of a folder above it brought along below it (other runs' scratch
    spaces), then a fresh tmpfs over it."""
    if not os.path.isdir(target):
        return
    below = []
    with open("/proc/self/mountinfo", "rb") as table:
        for line in table:
            point = codecs.escape_decode(line.split()[4])[0].decode(errors="surrogateescape")
            if point.startswith(target + "/"):
                below.append(point)
    detached: list[str] = []
    for point in sorted(below, key=len):  # the highest first: each takes those below it
        if not any(point == done or point.startswith(done + "/") for done in detached):
            with contextlib.suppress(OSError):
                syscalls.detach(point)
            detached.append(point)
    flags = syscalls.MS_NOSUID | syscalls.MS_NODEV
    syscalls.mount("tmpfs", target, "tmpfs", flags, "mode=0755,size=64k")


def finish_root(plan: list[Step], request: "RunRequest", mount_fds: list[int]) -> None:
    """Add the job's part to the run's root (its sizes, its paths), then switch to it."""
    flags = syscalls.MS_NOSUID | syscalls.MS_NODEV
    size = f"mode=1777,size={request['tmp_bytes']}"
    for action, target, _ in plan:
        if action == "tmpfs":
            syscalls.mount(None, target, None, syscalls.MS_REMOUNT | flags, size)
    hide = request.get("hide")
    for path, fd in zip(request["mounts"], mount_fds, strict=True):
        if hide and path.startswith(hide + "/"):  # the first of the run's paths inside it
            _hide(STAGE + hide)
            hide = None
        target = STAGE + path
        if not os.path.lexists(target):  # it may be in a folder attached before it
            os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.mkdir(target, 0o755)
            else:
                os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
        syscalls.attach(fd, target)
    if hide:
        _hide(STAGE + hide)
    for path in request.get("conceal") or ():
        target = STAGE + path
        if os.path.isdir(target) and not any(
            run_path.startswith(path + "/") for run_path in request["mounts"]
        ):  # shown empty: a small tmpfs over what the server's view bound there
            syscalls.mount("tmpfs", target, "tmpfs", flags, "mode=0755,size=4k")
    # chroot, not pivot_root: unmounting the old root would cost an RCU grace period
    # (~1 ms) per run. The run cannot leave it: it drops every capability before
    # running anything (no CAP_SYS_CHROOT, no mounts), holds no descriptor of a folder
    # outside, sees only its own processes in /proc, and the kernel refuses a user
    # namespace (the way to regain capabilities) to a chrooted process.
    os.chroot(STAGE)
    os.chdir("/")
