"""Unpacking a student's tar archive without trusting a byte of it.

The archive is decompressed and parsed by ``tarstream``, one 512-byte header at
a time, instead of through :mod:`tarfile`: its ``filter='data'`` was bypassed on
our machines (CVE-2025-4517), and iterating a hostile archive with it can take
gigabytes of memory. Here every entry is judged before it touches the disk (its
type, its path, collisions with earlier entries, the caps), then written without
ever following a link. Every violation is a
:class:`~chalk_client.errors.StudentMisbehaviorError`, never a crash.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from chalk_client.errors import StudentMisbehaviorError
from chalk_worker.sandbox.tarstream import (
    CHUNK,
    Archive,
    TarEntry,
    TarReader,
    padded,
    shown_name,
    tar_entries,
)

log = logging.getLogger(__name__)

_MAX_PART, _MAX_PATH = 255, 4096  # Linux's NAME_MAX and PATH_MAX
_FILE_TYPES = (b"0", b"\0", b"7")
_REFUSED_TYPES = {
    b"1": "a hard link",
    b"2": "a symbolic link",
    b"3": "a character device",
    b"4": "a block device",
    b"6": "a FIFO",
    b"S": "a sparse file",
}
_FILE, _FOLDER, _IMPLIED = "file", "folder", "implied folder"
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# Errors writing the copy that the archive's contents can cause (the reference counts a
# full disk, a name collision and an over-long path as tampering); others are ours.
_PROVOKED = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exhausted",
    errno.EFBIG: "a file is too large for the file system",
    errno.ENAMETOOLONG: "a name is too long for the file system",
    errno.EEXIST: "the name is already taken",
    errno.EMLINK: "a folder has too many entries for the file system",
}


def _bad(message: str) -> StudentMisbehaviorError:
    return StudentMisbehaviorError(message)


def _parts(name: bytes, max_depth: int) -> tuple[bytes, ...]:
    """The components of an entry's path, refused unless it stays inside the submission folder."""
    shown = shown_name(name)
    if not name:
        raise _bad("submission has an entry with an empty name")
    if b"\0" in name:
        raise _bad(f"submission entry {shown} has a NUL byte in its name")
    if name.startswith(b"/"):
        raise _bad(f"submission entry {shown} is an absolute path")
    if len(name) > _MAX_PATH:
        raise _bad(f"submission entry {shown} has a path longer than {_MAX_PATH} bytes")
    parts = tuple(part for part in name.split(b"/") if part not in (b"", b"."))
    if b".." in parts:
        raise _bad(f"submission entry {shown} leaves the submission folder")
    if any(len(part) > _MAX_PART for part in parts):
        raise _bad(f"submission entry {shown} has a name longer than {_MAX_PART} bytes")
    if len(parts) > max_depth:
        raise _bad(f"submission entry {shown} is {len(parts)} levels deep (limit {max_depth})")
    return parts


class _Tree:
    """What has been unpacked so far, known in memory so each entry is judged before writing."""

    def __init__(self, root: int, max_entries: int) -> None:
        self.kinds: dict[tuple[bytes, ...], str] = {}
        self._root = root
        self._max_entries = max_entries
        self._entries = 0

    def admit(self, parts: tuple[bytes, ...], kind: str, shown: str) -> None:
        """Record an entry (and the folders it implies), refusing collisions and the cap."""
        folders = [parts[:i] for i in range(1, len(parts))]
        for folder in folders:
            if self.kinds.get(folder) == _FILE:
                where = shown_name(b"/".join(folder))
                raise _bad(f"submission entry {shown} needs folder {where}, which is a file")
        new = [folder for folder in folders if folder not in self.kinds]
        seen = self.kinds.get(parts)
        if seen == kind:
            raise _bad(f"submission entry {shown} appears twice")
        if seen is not None and (seen, kind) != (_IMPLIED, _FOLDER):
            was = _FILE if seen == _FILE else _FOLDER
            raise _bad(f"submission entry {shown} is a {kind} but an earlier entry made it a {was}")
        self._entries += len(new) + (seen is None)
        if self._entries > self._max_entries:
            raise _bad(f"submission has more than {self._max_entries} entries (files and folders)")
        self.kinds.update(dict.fromkeys(new, _IMPLIED))
        self.kinds[parts] = kind

    def open_folder(self, parts: tuple[bytes, ...]) -> int:
        """A descriptor of the folder at ``parts``, made where missing; never follows a link."""
        fd = os.dup(self._root)
        try:
            for part in parts:
                made = False
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                    made = True
                child = os.open(part, _FOLDER_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
                if made:
                    os.fchmod(fd, 0o755)  # the worker's umask must not decide
        except BaseException:
            os.close(fd)
            raise
        return fd

    def write_file(self, parts: tuple[bytes, ...], mode: int, size: int, reader: TarReader) -> None:
        """Create the file at ``parts`` (it must not exist) and copy ``size`` bytes into it."""
        folder = self.open_folder(parts[:-1])
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, mode, dir_fd=folder)
        finally:
            os.close(folder)
        with open(fd, "wb") as out:
            os.fchmod(fd, mode)
            while size:
                piece = reader.exact(min(size, CHUNK))
                out.write(piece)
                size -= len(piece)


@contextlib.contextmanager
def _writing(shown: str) -> Iterator[None]:
    """Turn a destination error the submission can provoke into misbehaviour."""
    try:
        yield
    except OSError as exc:
        why = _PROVOKED.get(exc.errno or 0)
        if why is None:
            raise
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            log.warning("the disk of the job folder filled up while unpacking a submission")
        raise _bad(f"submission entry {shown} could not be written: {why}") from exc


def _write_entry(reader: TarReader, tree: _Tree, entry: TarEntry, max_depth: int) -> None:
    """Check one file or folder entry and write it (a file's data follows its header)."""
    kind, name, size, mode = entry
    shown = shown_name(name)
    is_folder = kind == b"5" or (kind == b"\0" and name.endswith(b"/"))
    if not is_folder and kind not in _FILE_TYPES:
        what = _REFUSED_TYPES.get(kind, f"of unsupported type {kind!r}")
        raise _bad(f"submission entry {shown} is {what}; only files and folders are allowed")
    parts = _parts(name, max_depth)
    if is_folder:
        if size:
            raise _bad(f"submission folder {shown} carries {size} bytes of data")
        if parts:  # "./" is the submission folder itself
            tree.admit(parts, _FOLDER, shown)
            with _writing(shown):
                os.close(tree.open_folder(parts))
        return
    if not parts:
        raise _bad(f"submission entry {shown} is a file in place of the submission folder")
    reader.reserve(padded(size))
    tree.admit(parts, _FILE, shown)
    with _writing(shown):
        tree.write_file(parts, 0o755 if mode & 0o111 else 0o644, size, reader)
    reader.exact(padded(size) - size)


def _unpack(reader: TarReader, tree: _Tree, max_depth: int) -> None:
    """Check and write the stream's entries until its end-of-archive block."""
    for entry in tar_entries(reader):
        _write_entry(reader, tree, entry, max_depth)


def unpack_submission(
    archive: Archive, dest: Path, *, max_bytes: int, max_entries: int, max_depth: int
) -> list[Path]:
    """Unpack an untrusted tar archive (plain, gzip, bzip2 or xz) into the empty folder ``dest``.

    Each header is checked before its entry is written: only regular files and folders,
    no absolute paths, ``..``, links, devices, FIFOs or sparse files, no name collisions.
    ``max_bytes`` caps the decompressed stream, headers and padding included, and is
    enforced while decompressing, so a bomb costs at most that much work. ``max_entries``
    counts files and folders, including folders only implied by a file's path;
    ``max_depth`` counts the components of a path. Files get mode 0o644 (0o755 when any
    execute bit was set), folders 0o755; nothing is ever written through a link.

    Any violation raises :class:`StudentMisbehaviorError` saying what was wrong, after
    removing what was already unpacked. Returns the files written, sorted by path.
    """
    if not archive:
        raise _bad("submission is not a tar archive (it is empty)")
    reader = TarReader(archive, max_bytes)
    root = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    tree = _Tree(root, max_entries)
    try:
        _unpack(reader, tree, max_depth)
    except BaseException:
        for parts in [parts for parts in tree.kinds if len(parts) == 1]:
            path = dest / os.fsdecode(parts[0])
            if tree.kinds[parts] == _FILE:
                path.unlink(missing_ok=True)
            else:
                shutil.rmtree(path, ignore_errors=True)
        raise
    finally:
        os.close(root)
    files = [parts for parts, kind in tree.kinds.items() if kind == _FILE]
    return sorted(dest / os.fsdecode(b"/".join(parts)) for parts in files)
