"""Control groups for one sandbox slot: a memory cap, a process cap, a kill switch,
and the counts of what the slot's runs used (CPU time, CPU waits, peak memory).

``SlotCgroups`` uses what ``cgroup_support.CgroupSupport.detect`` found on the
machine. A slot's groups are shared by every Chalk process on the machine
(each claims the slot in turn): a run makes them if they are missing, and only
the holder of the slot's lock removes them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

from chalk_worker.sandbox.cgroup_support import (
    CgroupSupport,
    read_counter,
    read_file,
    write_file,
)

log = logging.getLogger(__name__)

RECLAIM_FROM_BYTES = 4 * 1024 * 1024
"""Below this much memory charged to a slot between runs, ``drop_cached`` leaves it: the
reclaim would cost more CPU than the residue matters to a run's memory and limit."""


class SlotCgroups:
    """The groups of one sandbox slot; a run joins them all before it executes anything.

    Only the process holding the slot may use or remove its groups; another process
    may have removed them between two of this process's claims, so ``ensure`` makes
    them again (a ``mkdir`` that finds them costs a few microseconds).
    """

    def __init__(self, support: CgroupSupport, slot: str) -> None:
        self.support = support
        self._wanted = [
            base / slot
            for base in dict.fromkeys(
                p for p in (support.kill, support.memory, support.pids) if p is not None
            )
        ]
        self.folders: list[Path] = []
        """The slot's groups that exist, as of the last ``ensure``."""
        # The paths a run uses, as text, found once per ``ensure``: a run reads or
        # writes a dozen files here, and path objects cost more than the calls.
        self._texts: list[str] = []
        self._memory: str | None = None
        self._pids: str | None = None
        self._kill: str | None = None
        self._fds: list[int] = []
        self._warned: set[Path] = set()
        self._ensured = False
        self._no_memsw = False

    def prepare(self, memory_bytes: int, processes: int) -> None:
        """Make sure the slot's groups exist and set their limits (call while holding the slot).

        Another Chalk process (or another sandbox of this one) may have removed
        them since this handle last held the slot: a ``stat`` each finds out, and
        they are made again. Nobody removes them while the slot is held.
        """
        complete = len(self.folders) == len(self._wanted)  # else some could not be made: again
        if not (self._ensured and complete and all(map(os.path.isdir, self._texts))):
            self.ensure()
        self.set_limits(memory_bytes, processes)

    def ensure(self) -> None:
        """Make the slot's groups where they are missing (call while holding the slot)."""
        self._ensured = True
        present = []
        for folder in self._wanted:
            try:
                folder.mkdir(exist_ok=True)
                present.append(folder)
            except OSError as exc:
                if folder not in self._warned:
                    self._warned.add(folder)
                    log.warning("could not create cgroup %s: %s", folder, exc)
        self.folders = present
        self._texts = [str(folder) for folder in present]
        self._memory = self._folder(self.support.memory)
        self._pids = self._folder(self.support.pids)
        self._kill = self._folder(self.support.kill)

    def _folder(self, base: Path | None) -> str | None:
        if base is None:
            return None
        return next((str(f) for f in self.folders if f.parent == base), None)

    def set_limits(self, memory_bytes: int, processes: int) -> None:
        """Cap the slot's memory (a hog is killed by the kernel) and its process count."""
        memory = self._memory
        if memory is not None:
            if self.support.memory_v2:
                write_file(f"{memory}/memory.max", str(memory_bytes))
                with contextlib.suppress(OSError):
                    write_file(f"{memory}/memory.swap.max", "0")
            else:
                self._write_memsw(memory, "-1")
                write_file(f"{memory}/memory.limit_in_bytes", str(memory_bytes))
                self._write_memsw(memory, str(memory_bytes))
        if self._pids is not None:
            write_file(f"{self._pids}/pids.max", str(processes))

    def _write_memsw(self, memory: str, value: str) -> None:
        """The memory-and-swap cap of cgroup v1, where the kernel accounts swap."""
        if self._no_memsw:
            return
        try:
            write_file(f"{memory}/memory.memsw.limit_in_bytes", value)
        except FileNotFoundError:  # no swap accounting (where the group is): not looked for again
            self._no_memsw = os.path.isdir(memory)
        except OSError:
            pass

    def open_for_join(self) -> list[int]:
        """File descriptors of each ``cgroup.procs``, to write the child's pid into after fork."""
        self._fds = [
            os.open(f"{folder}/cgroup.procs", os.O_WRONLY | os.O_CLOEXEC) for folder in self._texts
        ]
        return self._fds

    def close_join(self) -> None:
        """Close what ``open_for_join`` opened."""
        for fd in self._fds:
            os.close(fd)
        self._fds = []

    def oom_kills(self) -> int:
        """How many processes the kernel killed for memory in this slot so far."""
        memory = self._memory
        if memory is None:
            return 0
        if self.support.memory_v2:
            return read_counter(f"{memory}/memory.events", "oom_kill")
        return read_counter(f"{memory}/memory.oom_control", "oom_kill")

    def cpu_usage_s(self) -> float | None:
        """CPU seconds every process of the slot has used so far (the cgroup2 group's
        ``cpu.stat``, kept without the cpu controller); ``None`` where there is none."""
        if self._kill is None:
            return None
        try:
            return read_counter(f"{self._kill}/cpu.stat", "usage_usec") / 1e6
        except OSError:
            return None

    def cpu_stall_s(self) -> float | None:
        """Seconds the slot's processes could have run but waited for a CPU, so far (the
        cgroup2 group's ``cpu.pressure``); ``None`` where the kernel does not count it."""
        if self._kill is None:
            return None
        try:
            line = read_file(f"{self._kill}/cpu.pressure").splitlines()[0]
        except (OSError, IndexError):
            return None
        total = line.rpartition("total=")[2]
        return int(total) / 1e6 if total.isdigit() else None

    def _memory_file(self, v2: str, v1: str) -> str | None:
        """The path of a file of the slot's memory group: ``v2``'s name or ``v1``'s."""
        if self._memory is None:
            return None
        return f"{self._memory}/{v2 if self.support.memory_v2 else v1}"

    def _memory_number(self, v2: str, v1: str) -> int | None:
        path = self._memory_file(v2, v1)
        if path is None:
            return None
        try:
            return int(read_file(path).strip())
        except (OSError, ValueError):
            return None

    def reset_memory_peak(self) -> bool:
        """Start the slot's peak memory afresh (its groups made where missing); ``False``
        where the kernel cannot."""
        if not self._ensured:
            self.ensure()
        path = self._memory_file("memory.peak", "memory.max_usage_in_bytes")
        if path is None:
            return False
        try:
            write_file(path, "0")
        except OSError:  # memory.peak is writable from Linux 6.12
            return False
        return True

    def drop_cached(self) -> None:
        """Reclaim what the slot's memory holds of files it read or wrote (call between
        runs): a compiler's libraries, say, charged to the slot, would otherwise count in
        the next run's memory until the kernel evicts them under its limit."""
        path = self._memory_file("memory.reclaim", "memory.force_empty")
        if path is None:
            return
        held = self.memory_bytes()
        if held is not None and held < RECLAIM_FROM_BYTES:
            return  # a reclaim costs more than this would skew a run's memory
        amount = str(held or 0) if self.support.memory_v2 else "0"
        with contextlib.suppress(OSError):  # busy (a process left), or nothing to reclaim
            write_file(path, amount)

    def memory_bytes(self) -> int | None:
        """The memory charged to the slot now (files it cached included)."""
        return self._memory_number("memory.current", "memory.usage_in_bytes")

    def memory_peak_bytes(self) -> int | None:
        """The most memory the slot's processes held together since the last reset."""
        return self._memory_number("memory.peak", "memory.max_usage_in_bytes")

    def kill_all(self) -> bool:
        """Kill every process in the slot at once; ``False`` when no kill switch exists here."""
        if self._kill is None:
            return False
        try:
            write_file(f"{self._kill}/cgroup.kill", "1")
        except OSError:
            return False
        return True

    def empty_all(self) -> bool:
        """Kill what is left in the slot's groups and wait until none is; ``False`` when
        there is no kill switch here (the caller must sweep by other means).

        Groups found empty (a run whose every process has ended) are not sent a kill.
        """
        if self._kill is None:
            return False
        if not self.members():
            return True
        return self.kill_all() and self.wait_empty()

    def members(self) -> set[int]:
        """Processes still in any of the slot's groups."""
        found: set[int] = set()
        for folder in self._texts:
            with contextlib.suppress(OSError, ValueError):
                found.update(int(pid) for pid in read_file(f"{folder}/cgroup.procs").split())
        return found

    def remove(self) -> None:
        """Remove the slot's groups if they are empty (call only while holding the slot)."""
        for folder in self._wanted:
            with contextlib.suppress(OSError):
                folder.rmdir()
        self.folders = []
        self._texts = []
        self._memory = self._pids = self._kill = None
        self._ensured = False

    def wait_empty(self, timeout_s: float = 5.0) -> bool:
        """Wait until no process is left in the slot's groups."""
        deadline = time.monotonic() + timeout_s
        while self.members():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True
