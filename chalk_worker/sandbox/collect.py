"""Unpacking a student's tar archive without trusting a byte of it.

The archive is decompressed and parsed here, one 512-byte header at a time, instead of
through :mod:`tarfile`: its ``filter='data'`` was bypassed on our machines
(CVE-2025-4517), and iterating a hostile archive with it can take gigabytes of memory.
Every header is judged before its entry touches the disk, and every violation is a
:class:`~chalk_client.errors.StudentMisbehaviorError`, never a crash.
"""

from __future__ import annotations

import bz2
import contextlib
import errno
import logging
import lzma
import mmap
import os
import re
import shutil
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from chalk_client.errors import StudentMisbehaviorError

log = logging.getLogger(__name__)

_BLOCK = 512
_CHUNK = 64 * 1024
_MAX_EXTENDED = 64 * 1024  # a GNU long name or PAX header; real ones are a few hundred bytes
_MAX_PART, _MAX_PATH = 255, 4096  # Linux's NAME_MAX and PATH_MAX
# Enough for every xz preset (-9 needs 65 MiB); refuses a stream asking for a 1.5 GiB dictionary.
_XZ_MEMLIMIT = 80 * 1024 * 1024
_ZERO_BLOCK = bytes(_BLOCK)
_FILE_TYPES = (b"0", b"\0", b"7")
_EXTENDED_TYPES = (b"L", b"K", b"x", b"g")
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


class _Decompressor(Protocol):
    @property
    def eof(self) -> bool: ...
    @property
    def needs_input(self) -> bool: ...
    @property
    def unused_data(self) -> bytes: ...
    def decompress(self, data: bytes, max_length: int, /) -> bytes: ...


class _GzipDecompressor:
    """zlib's gzip decoder behind the bz2/lzma interface (3.11's zlib has no ``needs_input``)."""

    def __init__(self) -> None:
        self._zlib = zlib.decompressobj(wbits=31)
        self.needs_input = True

    @property
    def eof(self) -> bool:
        return self._zlib.eof

    @property
    def unused_data(self) -> bytes:
        return self._zlib.unused_data

    def decompress(self, data: bytes, max_length: int, /) -> bytes:
        out = self._zlib.decompress(data or self._zlib.unconsumed_tail, max_length)
        # A full ``out`` may leave output pending inside zlib even with no input left.
        self.needs_input = not self._zlib.unconsumed_tail and len(out) < max_length
        return out


_FORMATS: tuple[tuple[bytes, Callable[[], _Decompressor]], ...] = (
    (b"\x1f\x8b", _GzipDecompressor),
    (b"BZh", bz2.BZ2Decompressor),
    (b"\xfd7zXZ\x00", lambda: lzma.LZMADecompressor(lzma.FORMAT_XZ, memlimit=_XZ_MEMLIMIT)),
)


Archive = bytes | mmap.mmap
"""The archive in memory, or a file mapped into it (pages are read as they are needed)."""


def _decompressed(
    archive: Archive, magic: bytes, new: Callable[[], _Decompressor]
) -> Iterator[bytes]:
    """Yield the archive decompressed in pieces of at most ``_CHUNK`` bytes, stream by stream."""
    position = 0
    while archive[position : position + len(magic)] == magic:
        decompressor = new()
        while not decompressor.eof:
            data = b""
            if decompressor.needs_input:
                data = archive[position : position + _CHUNK]
                if not data:
                    raise EOFError("the compressed data ends before its end-of-stream marker")
                position += len(data)
            yield decompressor.decompress(data, _CHUNK)
        position -= len(decompressor.unused_data)


def _pieces(archive: Archive) -> Iterator[bytes]:
    """The tar stream inside ``archive``: decompressed if its magic bytes say so."""
    plain = (archive[i : i + _CHUNK] for i in range(0, len(archive), _CHUNK))
    if _header_checksum_ok(archive[:_BLOCK]):  # a plain tar whose first name is "BZh..."
        return plain
    for magic, new in _FORMATS:
        if archive[: len(magic)] == magic:
            return _decompressed(archive, magic, new)
    return plain


class _Reader:
    """The tar stream, read in exact pieces and counted against ``max_bytes`` before reading."""

    def __init__(self, pieces: Iterator[bytes], max_bytes: int) -> None:
        self._pieces = pieces
        self._buffer = bytearray()
        self._max_bytes = max_bytes
        self.consumed = 0

    def reserve(self, size: int) -> None:
        """Refuse now if ``size`` more bytes would take the stream past ``max_bytes``."""
        if self.consumed + size > self._max_bytes:
            raise _bad(f"submission is larger than {self._max_bytes} bytes unpacked")

    def read(self, size: int) -> bytes:
        """``size`` bytes, or fewer only where the stream ends."""
        self.reserve(size)
        while len(self._buffer) < size:
            try:
                piece = next(self._pieces, None)
            except EOFError as error:
                raise _bad(f"submission archive is truncated: {error}") from error
            except (OSError, ValueError, zlib.error, lzma.LZMAError) as error:
                message = f"submission archive is damaged and cannot be decompressed ({error})"
                raise _bad(message) from error
            if piece is None:
                break
            self._buffer += piece
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        self.consumed += len(data)
        return data

    def exact(self, size: int) -> bytes:
        """``size`` bytes; a stream ending sooner is a truncated archive."""
        data = self.read(size)
        if len(data) < size:
            raise _bad("submission archive is truncated: it ends in the middle of an entry")
        return data


def _bad(message: str) -> StudentMisbehaviorError:
    return StudentMisbehaviorError(message)


def _show(name: bytes) -> str:
    text = name.decode("utf-8", "backslashreplace")
    return repr(text if len(text) <= 100 else text[:100] + "...")


def _padded(size: int) -> int:
    return -(-size // _BLOCK) * _BLOCK


def _number(field: bytes) -> int | None:
    """A numeric header field (octal text, or GNU base-256); None when malformed or negative."""
    if field[:1] == b"\x80":
        return int.from_bytes(field[1:], "big")
    digits = field.split(b"\0", 1)[0].strip()
    return int(digits or b"0", 8) if re.fullmatch(rb"[0-7]*", digits) else None


def _header_checksum_ok(block: bytes) -> bool:
    if len(block) < _BLOCK:
        return False
    stored = _number(block[148:156])
    # Some old tars summed signed bytes; tarfile accepts both, and so do we.
    unsigned = 256 + sum(struct.unpack_from("148B8x356B", block))
    signed = 256 + sum(struct.unpack_from("148b8x356b", block))
    return stored in (unsigned, signed)


def _pax_records(payload: bytes) -> dict[bytes, bytes]:
    """The ``key=value`` records of a PAX extended header."""
    records: dict[bytes, bytes] = {}
    position = 0
    while position < len(payload) and payload[position] != 0:
        space = payload.find(b" ", position)
        length = payload[position:space]
        end = position + int(length) if space > 0 and length.isdigit() else -1
        record = payload[space + 1 : end]
        if end <= space or end > len(payload) or not record.endswith(b"\n") or b"=" not in record:
            raise _bad("submission archive has a damaged PAX extended header")
        key, _, value = record[:-1].partition(b"=")
        records[key] = value
        position = end
    return records


def _parts(name: bytes, max_depth: int) -> tuple[bytes, ...]:
    """The components of an entry's path, refused unless it stays inside the submission folder."""
    shown = _show(name)
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
                where = _show(b"/".join(folder))
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

    def write_file(self, parts: tuple[bytes, ...], mode: int, size: int, reader: _Reader) -> None:
        """Create the file at ``parts`` (it must not exist) and copy ``size`` bytes into it."""
        folder = self.open_folder(parts[:-1])
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, mode, dir_fd=folder)
        finally:
            os.close(folder)
        with open(fd, "wb") as out:
            os.fchmod(fd, mode)
            while size:
                piece = reader.exact(min(size, _CHUNK))
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


def _header(reader: _Reader, first: bool) -> tuple[bytes, int, int] | None:
    """The next header block with its size and mode; ``None`` at the end-of-archive block."""
    block = reader.read(_BLOCK)
    if block == _ZERO_BLOCK:
        return None
    if not _header_checksum_ok(block):
        if first:
            raise _bad("submission is not a tar archive (it does not start with a tar header)")
        if len(block) < _BLOCK:
            raise _bad("submission archive is truncated: it ends before its end marker")
        raise _bad(f"submission archive is damaged: no tar header at byte {reader.consumed - 512}")
    size, mode = _number(block[124:136]), _number(block[100:108])
    if size is None or mode is None:
        raise _bad("submission archive has a damaged tar header (a malformed number)")
    return block, size, mode


def _read_extended(reader: _Reader, kind: bytes, size: int, extended: dict[bytes, bytes]) -> None:
    """Read a GNU long-name or PAX header into ``extended`` (path and size overrides)."""
    if size > _MAX_EXTENDED:
        raise _bad(f"submission has a {size}-byte extended header (limit {_MAX_EXTENDED})")
    payload = reader.exact(_padded(size))[:size]
    if kind == b"L":
        extended[b"long name"] = payload.rstrip(b"\0")
    elif kind == b"x":
        records = _pax_records(payload)
        if any(key.startswith(b"GNU.sparse.") for key in records):
            raise _bad("submission has a sparse file (GNU.sparse); only files are allowed")
        extended.update((k, v) for k, v in records.items() if k in (b"path", b"size") and v)


def _entry_name(block: bytes, size: int, extended: dict[bytes, bytes]) -> tuple[bytes, int]:
    """The entry's name and size, after the extended headers that preceded it (then forgotten)."""
    name = block[:100].split(b"\0", 1)[0]
    prefix = block[345:500].split(b"\0", 1)[0]
    if block[257:263] == b"ustar\0" and prefix:
        name = prefix + b"/" + name
    name = extended.get(b"path", extended.get(b"long name", name))
    if b"size" in extended:
        if not extended[b"size"].isdigit():
            raise _bad(f"submission entry {_show(name)} has a malformed PAX size")
        size = int(extended[b"size"])
    extended.clear()
    return name, size


def _write_entry(
    reader: _Reader, tree: _Tree, kind: bytes, name: bytes, size: int, mode: int, max_depth: int
) -> None:
    """Check one file or folder entry and write it (a file's data follows its header)."""
    shown = _show(name)
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
    reader.reserve(_padded(size))
    tree.admit(parts, _FILE, shown)
    with _writing(shown):
        tree.write_file(parts, 0o755 if mode & 0o111 else 0o644, size, reader)
    reader.exact(_padded(size) - size)


def _unpack(reader: _Reader, tree: _Tree, max_depth: int) -> None:
    """Parse headers and write entries until the end-of-archive block."""
    extended: dict[bytes, bytes] = {}  # path/size overrides from GNU and PAX headers
    first = True
    while (header := _header(reader, first)) is not None:
        first = False
        block, size, mode = header
        kind = block[156:157]
        if kind in _EXTENDED_TYPES:
            _read_extended(reader, kind, size, extended)
            continue
        name, size = _entry_name(block, size, extended)
        _write_entry(reader, tree, kind, name, size, mode, max_depth)


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
    reader = _Reader(_pieces(archive), max_bytes)
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
