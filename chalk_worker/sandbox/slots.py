"""Sandbox slots: one unprivileged uid per concurrently running script, machine-wide.

Per-uid limits (``RLIMIT_NPROC``) and the "kill everything of this uid" sweep
only hold if no two running scripts share a uid, also across worker processes
on one machine. A slot is claimed with an exclusive ``flock`` on a file named
after it; the kernel releases it if the worker dies.

Whatever belongs to a slot on the machine (its cgroups) is shared by every Chalk
process there, started and stopped in any order: it is made by whoever claims
the slot when it is missing, and removed only by a holder of the slot's lock
(``SlotPool.holding``), which proves no other process uses it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from chalk_client.errors import ConfigurationError


@dataclass(frozen=True)
class Slot:
    """A claimed slot: its number and the uid/gid its scripts run as."""

    number: int
    uid: int
    gid: int

    @property
    def name(self) -> str:
        """The slot's name, used for its cgroups: after its uid, which is what slots share.

        Two Chalk set-ups on one machine with other lock folders but the same uids
        would share a uid's processes anyway; naming the groups by uid keeps two
        set-ups with distinct uids (``CHALK_SANDBOX_UID_BASE``) fully apart.
        """
        return f"uid-{self.uid}"


class SlotPool:
    """Hands out slots ``0 .. count-1`` with uids from ``uid_base``."""

    def __init__(self, lock_dir: Path, uid_base: int, count: int) -> None:
        self.lock_dir = lock_dir
        self.uid_base = uid_base
        self.count = count
        lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _lock_path(self, number: int) -> Path:
        return self.lock_dir / f"slot-{number}.lock"

    def _slot(self, number: int) -> Slot:
        uid = self.uid_base + number
        return Slot(number=number, uid=uid, gid=uid)

    @contextlib.contextmanager
    def holding(self, number: int) -> Iterator[Slot | None]:
        """The slot ``number`` if no process holds it now (held for the block), else ``None``."""
        fd = os.open(self._lock_path(number), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield None
                return
            yield self._slot(number)
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    @contextlib.contextmanager
    def claim(self, wait_s: float = 60.0) -> Iterator[Slot]:
        """Hold a free slot for the duration of the ``with`` block: the lowest one free.

        The lowest, not the next in turn: a process then keeps to a few slots,
        whose cgroups it made already (a new slot costs its groups, and removing
        them when the process ends).
        """
        deadline = time.monotonic() + wait_s
        while True:
            for number in range(self.count):
                fd = os.open(self._lock_path(number), os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                try:
                    yield self._slot(number)
                finally:
                    os.close(fd)  # closing the descriptor releases the lock
                return
            if time.monotonic() > deadline:
                raise ConfigurationError(
                    f"all {self.count} sandbox slots are busy; raise CHALK_SANDBOX_SLOTS or run "
                    "fewer concurrent scripts per machine"
                )
            time.sleep(0.01)


def processes_of(uid: int) -> list[int]:
    """Every process whose real uid is ``uid``.

    Read from ``/proc/<pid>/status``, not the folder's owner: a process that made
    itself non-dumpable shows its ``/proc`` folder as root's.
    """
    found = []
    marker = f"\t{uid}\t"
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError), open(f"/proc/{entry.name}/status") as status:
            for line in status:
                if line.startswith("Uid:"):
                    if line[4:].startswith(marker):
                        found.append(int(entry.name))
                    break
    return found
