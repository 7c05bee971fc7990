"""Job folders: made per job, named after the process that owns them, swept when it is gone.

A worker killed mid-job (``kill -9``, an OOM kill, a power cut) cannot remove
its job folder, nor unmount a script's scratch tmpfs inside it. The folder's
name carries the owner's pid, so the next worker process to start on the
machine removes folders whose owner no longer runs.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import logging
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path

from chalk_client.settings import ChalkSettings
from chalk_worker.sandbox import syscalls

log = logging.getLogger(__name__)

PREFIX = "chalk-job-"
_OWNED = re.compile(rf"^{PREFIX}(\d+)-")


def make_job_dir(settings: ChalkSettings) -> Path:
    """A fresh private folder for one job, named after this process."""
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=settings.work_dir))


def work_root(settings: ChalkSettings) -> Path:
    """The folder that holds every job's folder (and this process's in-memory area)."""
    return Path(settings.work_dir or tempfile.gettempdir())


def job_dir_name(settings: ChalkSettings, in_memory: bool = False) -> Path:
    """The path of a new job folder (not made yet: ``mkdir(mode=0o700)`` it where it suits).

    Named as ``make_job_dir`` names them, with 64 random bits: the sweep finds it.
    ``in_memory``: for a job with nothing to unpack, in this process's in-memory
    area where it has one (``_memory_area``).
    """
    root = work_root(settings)
    if in_memory:
        with _areas_lock:
            area = _memory_area(root)
            if area is not None:
                _area_jobs[area] += 1  # until remove_job_folder
                return area / os.urandom(8).hex()
    return root / f"{PREFIX}{os.getpid()}-{os.urandom(8).hex()}"


_areas: dict[tuple[int, Path], Path | None] = {}
_area_jobs: collections.Counter[Path] = collections.Counter()
"""Jobs whose folder is in each area, from ``job_dir_name`` to ``remove_job_folder``."""
_areas_lock = threading.Lock()


def _memory_area(root: Path) -> Path | None:
    """This process's folder for the folders of jobs with nothing to unpack, or ``None``.

    A small tmpfs in ``root`` (where this process may mount one), made on first
    use: such a folder only ever holds an empty ``submission/`` and its scripts'
    scratch mount points, and a ``mkdir`` there costs nothing, where on a busy
    ext4 it waits for the journal (0.1-0.2 ms here) and then its removal again.
    Named like a job folder of this process: if the process dies, the next
    worker's sweep unmounts and removes it; ``release_idle_areas`` and the
    process's exit remove it. Call with ``_areas_lock`` held.
    """
    key = (os.getpid(), root)
    if key not in _areas:
        _areas[key] = _make_area(root)
    return _areas[key]


def in_memory_area(folder: Path) -> bool:
    """Whether ``folder`` is a job's folder in this process's in-memory area."""
    with _areas_lock:
        return any(area == folder.parent for area in _areas.values())


def _make_area(root: Path) -> Path | None:
    area = root / f"{PREFIX}{os.getpid()}-{os.urandom(8).hex()}"
    try:
        area.mkdir(mode=0o711)
    except OSError:
        return None
    flags = syscalls.MS_NOSUID | syscalls.MS_NODEV
    try:
        syscalls.mount("chalk", str(area), "tmpfs", flags, "size=1m,mode=0711")
    except OSError:  # not root, or no mounts here: job folders on disk
        area.rmdir()
        return None
    return area


def _remove_areas_at_exit() -> None:
    """This process's areas go with it (a forked child's exit leaves its parent's)."""
    if not any(area and key[0] == os.getpid() for key, area in _areas.items()):
        return
    from chalk_worker.sandbox import cleanup

    cleanup.drain()  # their job folders' scratch spaces are unmounted first
    _remove_areas(idle_only=False)


atexit.register(_remove_areas_at_exit)


def _unmount_area(area: Path) -> None:
    with contextlib.suppress(OSError):
        syscalls.detach(str(area))
    shutil.rmtree(area, ignore_errors=True)


def release_idle_areas() -> None:
    """Remove this process's in-memory areas that hold no job's folder now.

    For ``score_job`` and ``score_jobs``, whose callers expect no folder left in
    the work folder when they return (call after the cleaner drained); the next
    job makes its area again. A worker keeps its area while it lives.
    """
    _remove_areas(idle_only=True)


def _remove_areas(idle_only: bool) -> None:
    """Unmount and remove this process's areas (only those no job's folder is in)."""
    with _areas_lock:
        for key, area in list(_areas.items()):
            busy = idle_only and area is not None and _area_jobs[area]
            if area is not None and key[0] == os.getpid() and not busy:
                del _areas[key]
                _unmount_area(area)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale_job_dirs(settings: ChalkSettings) -> int:
    """Remove job folders (and mounts inside them) left by processes that no longer run."""
    root = Path(settings.work_dir or tempfile.gettempdir())
    stale = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            match = _OWNED.match(entry.name)
            if match and entry.is_dir(follow_symlinks=False) and not _alive(int(match[1])):
                stale.append(Path(entry.path))
    if not stale:
        return 0
    with contextlib.suppress(OSError):
        mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
        for point in sorted(mounts, key=len, reverse=True):
            if any(point == folder or point.startswith(f"{folder}/") for folder in map(str, stale)):
                with contextlib.suppress(OSError):
                    syscalls.detach(point)
    for folder in stale:
        shutil.rmtree(folder, ignore_errors=True)
    log.info("removed %d job folder(s) left by worker processes that died", len(stale))
    return len(stale)


_in_memory_folders = True
"""Whether folders made by ``make_job_folder`` get a tmpfs (off after a mount fails)."""


_retired: collections.OrderedDict[Path, None] = collections.OrderedDict()
_retired_lock = threading.Lock()
_RETIRED_KEPT = 10_000
"""Job folders remembered as ended (names are random: any recent few suffice)."""


class JobEnded(Exception):
    """Raised by ``make_job_folder`` for a job that has ended (it was cancelled)."""


def make_job_folder(job_dir: Path, in_memory: bool = False, size_bytes: int = 1 << 20) -> None:
    """Make a job's folder and its empty ``submission/``, unless made already.

    Called by a scoring script's thread for a job with nothing to unpack. Such
    a folder only ever holds mount points (its scripts' scratch spaces) and an
    empty ``submission/``: in this process's in-memory area where it has one
    (``job_dir_name``); else, with ``in_memory``, a tmpfs of ``size_bytes`` of
    its own where this process may mount one. A ``mkdir`` on a busy ext4 waits
    for its journal (0.1-0.2 ms each here); in memory the folders inside cost
    nothing. ``remove_job_folder`` unmounts it. Raises ``JobEnded`` for a job
    already handed to the cleaner (a cancelled job whose script's thread
    started late).
    """
    global _in_memory_folders
    with _retired_lock:
        if job_dir in _retired:
            raise JobEnded(f"the job of {job_dir.name} has ended")
        try:
            job_dir.mkdir(mode=0o700)
        except FileExistsError:
            return
    if in_memory and _in_memory_folders and not in_memory_area(job_dir):
        flags = syscalls.MS_NOSUID | syscalls.MS_NODEV
        options = f"size={max(size_bytes, 1 << 20)},mode=0700"
        try:
            syscalls.mount("chalk", str(job_dir), "tmpfs", flags, options)
        except OSError:
            _in_memory_folders = False  # not root, or no mounts here: folders on disk
    (job_dir / "submission").mkdir()


def retire_job_folder(job_dir: Path) -> None:
    """Mark the job's folder as ended (no script may make it again); then remove it."""
    with _retired_lock:
        _retired[job_dir] = None
        while len(_retired) > _RETIRED_KEPT:
            _retired.popitem(last=False)


def remove_job_folder(job_dir: Path) -> None:
    """Remove a job's folder, unmounting it first if ``make_job_folder`` mounted one."""
    if os.path.ismount(job_dir):
        with contextlib.suppress(OSError):
            syscalls.detach(str(job_dir))
    shutil.rmtree(job_dir, ignore_errors=True)
    with _areas_lock:
        if _area_jobs[job_dir.parent] > 0:
            _area_jobs[job_dir.parent] -= 1
