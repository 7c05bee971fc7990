"""What a machine offers of control groups, found by trying: ``CgroupSupport.detect``.

Machines differ: cgroup v1 controllers (``memory``, ``pids``) beside a cgroup2
mount used only for ``cgroup.kill`` (hybrid), or one cgroup2 hierarchy with
everything. ``detect`` makes (and removes) a group in each place to learn what
is writable; ``chalk_worker.sandbox.cgroups.SlotCgroups`` uses what it found.
The small file helpers here are theirs too: one system call each.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

V1_ROOT = Path("/sys/fs/cgroup")
V2_CANDIDATES = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))
GROUP_NAME = "chalk"
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT, _MS_RELATIME = 2, 4, 8, 32, 1 << 21


def write_file(path: str | Path, value: str) -> None:
    """Write ``value`` to a control file in one call."""
    # One call each, not a Python file object: a run makes a dozen of these.
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def read_file(path: str | Path) -> str:
    """A control file's text, read with plain system calls."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode()


def read_counter(path: str | Path, key: str) -> int:
    """The value of ``key`` in a ``name value`` file (``memory.events``...); 0 when absent."""
    try:
        for line in read_file(path).splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def own_cgroup(controller: str) -> str:
    """This process's cgroup path for a v1 ``controller``, or for cgroup2 with ``""``."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return "/"
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if (controller and controller in controllers.split(",")) or (
            not controller and not controllers
        ):
            return path
    return "/"


def _below(base: Path, path: str) -> Path:
    return base / path.lstrip("/")


def _usable_dir(base: Path, probe_file: str) -> Path | None:
    """``base/chalk`` if we can make and remove child groups there that have ``probe_file``."""
    group = base / GROUP_NAME
    try:
        group.mkdir(exist_ok=True)
        probe = group / f"probe-{os.getpid()}"
        probe.mkdir(exist_ok=True)
        ok = (probe / probe_file).exists()
        probe.rmdir()
    except OSError:
        return None
    return group if ok else None


def favor_dynmods(mount: Path) -> bool:
    """Make moving processes between cgroups cheap (~0.3 ms, not ~10 ms): ``favordynmods``.

    Each sandboxed run moves its first process into the slot's groups; without
    this mount option every move may wait for an RCU grace period. Returns
    whether the option is on afterwards.
    """
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return False
    for line in mounts:
        fields = line.split()
        if len(fields) > 3 and fields[1] == str(mount) and fields[2] == "cgroup2":
            if "favordynmods" in fields[3].split(","):
                return True
            libc = ctypes.CDLL(None, use_errno=True)
            flags = _MS_REMOUNT | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC | _MS_RELATIME
            done: int = libc.mount(
                b"cgroup2", str(mount).encode(), b"cgroup2", flags, b"favordynmods"
            )
            return done == 0
    return False


@dataclass(frozen=True)
class CgroupSupport:
    """Where each cgroup feature lives on this machine (``None``: not available)."""

    kill: Path | None
    """cgroup2 folder whose children have ``cgroup.kill``."""
    memory: Path | None
    """Folder whose children cap memory (v1 ``memory`` or v2 with the controller)."""
    pids: Path | None
    """Folder whose children cap processes."""
    memory_v2: bool = False
    pids_v2: bool = False
    fast_moves: bool = False
    """Whether ``favordynmods`` is on, which makes each run's cgroup move cheap."""

    @classmethod
    def detect(cls, tune: bool = True) -> CgroupSupport:
        """Probe the machine by making (and removing) a group in each place.

        With ``tune``, turn on ``favordynmods`` on the cgroup2 mount (see ``favor_dynmods``).
        """
        kill = memory = pids = None
        memory_v2 = pids_v2 = fast = False
        for mount in V2_CANDIDATES:
            if (mount / "cgroup.controllers").exists():
                fast = tune and favor_dynmods(mount)
                # Groups go below our own, so limits around the worker also hold for scripts.
                base = _below(mount, own_cgroup(""))
                kill = _usable_dir(base, "cgroup.kill")
                if kill is not None:
                    wanted = {"memory", "pids"} & set(
                        (base / "cgroup.controllers").read_text().split()
                    )
                    for controller in sorted(wanted):
                        with contextlib.suppress(OSError):
                            write_file(base / "cgroup.subtree_control", f"+{controller}")
                            write_file(kill / "cgroup.subtree_control", f"+{controller}")
                    enabled = set((kill / "cgroup.subtree_control").read_text().split())
                    if "memory" in enabled:
                        memory, memory_v2 = kill, True
                    if "pids" in enabled:
                        pids, pids_v2 = kill, True
                break
        if memory is None and (V1_ROOT / "memory" / "memory.limit_in_bytes").exists():
            memory = _usable_dir(
                _below(V1_ROOT / "memory", own_cgroup("memory")), "memory.limit_in_bytes"
            )
        if pids is None and (V1_ROOT / "pids" / "cgroup.procs").exists():
            pids = _usable_dir(_below(V1_ROOT / "pids", own_cgroup("pids")), "pids.max")
        return cls(
            kill=kill,
            memory=memory,
            pids=pids,
            memory_v2=memory_v2,
            pids_v2=pids_v2,
            fast_moves=fast,
        )
