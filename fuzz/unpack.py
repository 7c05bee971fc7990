"""Fuzz the submission unpacker: ``unpack_submission`` on any bytes, as a worker calls it.

The contract (``chalk_worker.sandbox.collect``): the archive is unpacked, or refused
with ``StudentMisbehaviorError`` with nothing left behind; never another exception.
Whatever happens, nothing is created, opened for writing or removed outside the
target folder (an audit hook watches every such call), and what is left there is
only regular files and folders, within the caps on bytes, entries and depth, with
the modes the unpacker promises, and exactly the files it says it wrote.

A mutated header almost never keeps a valid checksum, so an input that is not
compressed is unpacked a second time with the checksum of every 512-byte block
made right (data blocks lose 8 bytes to it, which changes nothing that matters),
from a file mapped into memory as a worker maps a large archive: that way the
mutations reach the entries themselves.
"""

from __future__ import annotations

import mmap
import os
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from chalk_client.errors import StudentMisbehaviorError
from chalk_worker.sandbox.collect import unpack_submission
from chalk_worker.sandbox.tarstream import BLOCK, Archive
from fuzz.harness import ContractBroken, Target, main

MAX_BYTES = 256 * 1024
"""The cap on the decompressed stream (headers and padding included)."""
MAX_ENTRIES = 40
MAX_DEPTH = 6

_COMPRESSED = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00")
_WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_NEVER = ("os.symlink", "os.link", "os.mknod", "os.mkfifo", "os.rename", "os.chown")
_PATHS = ("os.mkdir", "os.remove", "os.rmdir", "shutil.rmtree", "os.chmod")


class _Watch:
    """Audit events of the unpacking thread that touch the file system, while it unpacks."""

    def __init__(self) -> None:
        self.dest = ""
        self.thread: int | None = None
        self.problems: list[str] = []

    def hear(self, event: str, args: tuple[object, ...]) -> None:
        if self.thread != threading.get_ident():
            return
        if event in _NEVER:
            self.problems.append(f"{event}{args!r:.200}")
        elif event == "open":
            path, _mode, flags = args
            if isinstance(flags, int) and flags & _WRITES:
                self._where(event, path)
        elif event in _PATHS:
            if event == "os.mkdir" and args[2] in (None, -1) and "/" not in str(args[0]):
                self.problems.append(f"os.mkdir of {args[0]!r} in the working folder")
            self._where(event, args[0])

    def _where(self, event: str, path: object) -> None:
        """A path the unpacker writes: a name in a folder it holds open, or one below ``dest``."""
        if isinstance(path, int):  # a descriptor: fchmod of a file it made
            return
        text = os.fsdecode(path) if isinstance(path, (str, bytes)) else str(path)
        if "/" not in text:
            if text in ("", ".", ".."):
                self.problems.append(f"{event} of {text!r}")
            return
        real = os.path.realpath(text)
        if not (real == self.dest or real.startswith(self.dest + os.sep)):
            self.problems.append(f"{event} of {text!r}, outside {self.dest}")


_watch = _Watch()
_hooked = False


@contextmanager
def _watching(dest: Path) -> Iterator[None]:
    global _hooked
    if not _hooked:  # on first use: an audit hook stays for the life of the process
        sys.addaudithook(_watch.hear)
        _hooked = True
    _watch.dest, _watch.thread, _watch.problems = str(dest), threading.get_ident(), []
    try:
        yield
    finally:
        _watch.thread = None


def _left(dest: Path) -> tuple[list[Path], int, int]:
    """The files under ``dest``, the entries, and the bytes; raises on anything else there."""
    files: list[Path] = []
    entries = size = 0
    for folder, names, file_names in os.walk(dest):
        for name in names + file_names:
            path = Path(folder, name)
            info = path.lstat()
            entries += 1
            depth = len(path.relative_to(dest).parts)
            if depth > MAX_DEPTH:
                raise ContractBroken(f"{path} is {depth} levels deep (limit {MAX_DEPTH})")
            modes: tuple[int, ...] = (0o755,)  # a folder's
            if stat.S_ISREG(info.st_mode):
                files.append(path)
                size += info.st_size
                modes = (0o644, 0o755)
            elif not stat.S_ISDIR(info.st_mode):
                raise ContractBroken(f"{path} is neither a file nor a folder: {info}")
            if stat.S_IMODE(info.st_mode) not in modes:
                raise ContractBroken(f"{path} has mode {stat.S_IMODE(info.st_mode):o}")
    return sorted(files), entries, size


def with_checksums(data: bytes) -> bytes:
    """``data`` with the checksum field of each of its whole 512-byte blocks set right."""
    fixed = bytearray(data)
    for start in range(0, len(fixed) - BLOCK + 1, BLOCK):
        block = fixed[start : start + BLOCK]
        if any(block):
            block[148:156] = b" " * 8
            block[148:156] = b"%06o\0 " % sum(block)
            fixed[start : start + BLOCK] = block
    return bytes(fixed)


def check(data: bytes) -> None:
    """Unpack ``data`` (and its checksums made right) and hold each outcome to the contract."""
    _check_unpacking(data)
    if len(data) >= BLOCK and not data.startswith(_COMPRESSED):
        fd = os.memfd_create("chalk-fuzz-archive")
        try:
            os.write(fd, with_checksums(data))
            with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mapped:
                _check_unpacking(mapped)
        finally:
            os.close(fd)


def _check_unpacking(archive: Archive) -> None:
    base = Path(tempfile.mkdtemp(prefix="chalk-fuzz-unpack-"))
    try:
        dest = base / "submission"
        dest.mkdir()
        written: list[Path] | None = None
        with _watching(dest), suppress(StudentMisbehaviorError):
            written = unpack_submission(
                archive,
                dest,
                max_bytes=MAX_BYTES,
                max_entries=MAX_ENTRIES,
                max_depth=MAX_DEPTH,
            )
        if _watch.problems:
            raise ContractBroken(f"touched outside the folder: {_watch.problems}")
        if os.listdir(base) != ["submission"]:
            raise ContractBroken(f"written beside the folder: {os.listdir(base)}")
        files, entries, size = _left(dest)
        if written is None and entries:
            raise ContractBroken(f"refused, yet {entries} entries were left behind")
        if written is not None and written != files:
            raise ContractBroken(f"says it wrote {written}, left {files}")
        if entries > MAX_ENTRIES or size > MAX_BYTES:
            raise ContractBroken(f"{entries} entries of {size} bytes left, past the caps")
    finally:
        shutil.rmtree(base)


TARGET = Target(
    name="unpack",
    check=check,
    doc=__doc__ or "",
    flags=("-max_len=16384", "-rss_limit_mb=1024"),
)

if __name__ == "__main__":
    main(TARGET)
