"""Programs already built, kept on the worker so the same program is never compiled twice.

RL batches score the same program again and again (several rollouts reach the
same code). A build is kept under a key made of the language, the
toolchain's version, the compile command and the source: a later job with the
same key gets a copy of that build instead of compiling. A build only ever
stands for its own source (one job's source cannot reach another's key), and
what is kept is copied out of the sandbox file by file: regular files and
folders only, none through a link, within size limits.

The cache is a folder of the worker's machine (``chalk-builds`` beside the job
folders), shared by its processes: entries are written under a temporary name
and renamed into place, and the oldest are removed when it grows past
``CHALK_BUILD_CACHE_MB`` or holds more than ``MAX_ENTRIES`` builds. Measuring
the cache means walking it, so a process does so only when what it has kept
since its last walk could have filled it, and every ``TRIM_EVERY`` builds kept
(other processes keep builds too). A cache folder (or entry) that is not the worker's
own, closed to others, is not used: in a shared temporary folder anyone could
have made it first.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

MAX_FILES = 10_000
"""Files one build may keep."""
MAX_ENTRIES = 20_000
"""Builds the cache keeps at most (a walk of the cache stays a few milliseconds)."""
TRIM_EVERY = 256
"""Builds a process keeps between two walks of the cache, at most."""
_warned: set[Path] = set()
_since_walk: dict[Path, list[int]] = {}
"""Per cache folder: what this process knew it held at its last walk (bytes, builds), plus
what it has kept since."""


class BuildTooLarge(Exception):
    """Raised when a build has more files or bytes than may be kept."""


def build_key(parts: Sequence[str], source: bytes) -> str:
    """The key of a build: ``parts`` (language, version, command...) and the source."""
    digest = hashlib.sha256(json.dumps(list(parts)).encode())
    digest.update(b"\0")
    digest.update(source)
    return digest.hexdigest()


def copy_tree(source: Path, target: Path, max_bytes: int) -> int:
    """Copy ``source`` (a file or a folder) to ``target``: regular files and folders only,
    never through a link; files made readable (and executable where they were) by all.

    Returns the bytes copied; raises ``BuildTooLarge`` past ``max_bytes`` or
    ``MAX_FILES``, and ``OSError`` for anything else (a link, a device...).
    """
    budget = [max_bytes, MAX_FILES]
    _copy(source, target, budget)
    return max_bytes - budget[0]


def _copy(source: Path, target: Path, budget: list[int]) -> None:
    info = os.lstat(source)
    if stat.S_ISDIR(info.st_mode):
        os.mkdir(target, 0o755)
        with os.scandir(source) as entries:
            for entry in entries:
                _copy(Path(entry.path), target / entry.name, budget)
        return
    if not stat.S_ISREG(info.st_mode):
        raise OSError(f"{source.name} is neither a file nor a folder")
    budget[0] -= info.st_size
    budget[1] -= 1
    if budget[0] < 0 or budget[1] < 0:
        raise BuildTooLarge(f"the build is larger than {MAX_FILES} files or the cache allows")
    mode = 0o755 if info.st_mode & 0o111 else 0o644
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        with os.fdopen(fd, "rb", closefd=False) as reader, open(target, "xb") as writer:
            shutil.copyfileobj(reader, writer, 1 << 20)
    finally:
        os.close(fd)
    os.chmod(target, mode)


class BuildCache:
    """Builds kept in ``root``, at most ``max_bytes`` of them."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes

    def _trusted(self, path: Path) -> bool:
        """Whether ``path`` is a folder of this process's user that no one else may write
        (not a link): a cache anyone could write to would hand out their builds."""
        try:
            info = os.lstat(path)
        except OSError:
            return False
        mine = stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()
        if mine and not info.st_mode & 0o022:
            return True
        if path == self.root and path not in _warned:
            _warned.add(path)
            log.warning(
                "the build cache %s is not a folder of this user closed to others: not used "
                "(remove it, or set CHALK_WORK_DIR to a folder of the worker's own)",
                path,
            )
        return False

    def restore(self, key: str, into: Path) -> bool:
        """Copy the build kept under ``key`` into the folder ``into``; whether one was kept."""
        kept = self.root / key
        if not (self._trusted(self.root) and self._trusted(kept)):
            return False
        try:
            names = os.listdir(kept)
        except OSError:
            return False
        try:
            for name in names:
                copy_tree(kept / name, into / name, self.max_bytes)
        except (OSError, BuildTooLarge) as exc:
            log.warning("a kept build could not be used (%s); compiling again", exc)
            for name in names:
                _remove(into / name)
            return False
        with contextlib.suppress(OSError):
            os.utime(kept)  # recently used: the last to go
        return True

    def keep(self, key: str, folder: Path, names: Sequence[str]) -> None:
        """Keep the build ``names`` (files or folders of ``folder``) under ``key``."""
        if self.max_bytes <= 0 or (self.root / key).exists():
            return
        try:
            self.root.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            log.warning("could not keep a build in %s: %s", self.root, exc)
            return
        if not self._trusted(self.root):
            return
        try:
            staging = Path(tempfile.mkdtemp(prefix=".new-", dir=self.root))
        except OSError as exc:
            log.warning("could not keep a build in %s: %s", self.root, exc)
            return
        added = 0
        try:
            for name in names:
                added += copy_tree(folder / name, staging / name, self.max_bytes)
            os.chmod(staging, 0o755)
            os.rename(staging, self.root / key)
        except (OSError, BuildTooLarge) as exc:
            if not (self.root / key).exists():  # else another process kept it first
                log.info("build not kept: %s", exc)
            _remove(staging)
            return
        self._counted(added)

    def _counted(self, added: int) -> None:
        """Count a build kept; walk and trim the cache when it may be full, or is due."""
        known = _since_walk.get(self.root)
        if known is None:
            self._trim()
            return
        known[0] += added
        known[1] += 1
        known[2] += 1
        if known[0] > self.max_bytes or known[1] > MAX_ENTRIES or known[2] >= TRIM_EVERY:
            self._trim()

    def _trim(self) -> None:
        """Remove the least recently used builds while the cache holds more than its size
        (or more than ``MAX_ENTRIES`` builds)."""
        entries = []
        total = 0
        with contextlib.suppress(OSError), os.scandir(self.root) as scan:
            for entry in scan:
                if entry.name.startswith("."):
                    continue
                size = _size(Path(entry.path))
                entries.append((entry.stat(follow_symlinks=False).st_mtime, size, entry.path))
                total += size
        count = len(entries)
        for _, size, path in sorted(entries):
            if total <= self.max_bytes and count <= MAX_ENTRIES:
                break
            _remove(Path(path))
            total -= size
            count -= 1
        _since_walk[self.root] = [total, count, 0]


def _size(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()
