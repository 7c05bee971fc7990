"""Reading an untrusted tar archive as a stream: decompression, exact reads, headers.

``TarReader`` decompresses the archive (plain, gzip, bzip2 or xz) in pieces of
at most 64 KiB and counts every byte against a cap before reading it, so a
compression bomb costs at most the cap's worth of work. ``tar_entries`` parses
the stream one 512-byte header at a time and folds GNU long names and PAX
headers into the entry they precede; what the entry may be, and writing it, is
left to ``collect``. Every malformed archive is a
:class:`~chalk_client.errors.StudentMisbehaviorError`, never a crash.
"""

from __future__ import annotations

import bz2
import lzma
import mmap
import re
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import NamedTuple, Protocol

from chalk_client.errors import StudentMisbehaviorError

BLOCK = 512
"""Size of a tar header, and the unit that every entry's data is padded to."""
CHUNK = 64 * 1024
"""Largest piece decompressed, or copied into a file, at a time."""
_MAX_EXTENDED = 64 * 1024  # a GNU long name or PAX header; real ones are a few hundred bytes
# Enough for every xz preset (-9 needs 65 MiB); refuses a stream asking for a 1.5 GiB dictionary.
_XZ_MEMLIMIT = 80 * 1024 * 1024
_MAX_DIGITS = 20  # of a PAX number: 2**64 has 20
_ZERO_BLOCK = bytes(BLOCK)
_EXTENDED_TYPES = (b"L", b"K", b"x", b"g")


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
    """Yield the archive decompressed in pieces of at most ``CHUNK`` bytes, stream by stream."""
    position = 0
    while archive[position : position + len(magic)] == magic:
        decompressor = new()
        while not decompressor.eof:
            data = b""
            if decompressor.needs_input:
                data = archive[position : position + CHUNK]
                if not data:
                    raise EOFError("the compressed data ends before its end-of-stream marker")
                position += len(data)
            yield decompressor.decompress(data, CHUNK)
        position -= len(decompressor.unused_data)


def _pieces(archive: Archive) -> Iterator[bytes]:
    """The tar stream inside ``archive``: decompressed if its magic bytes say so."""
    plain = (archive[i : i + CHUNK] for i in range(0, len(archive), CHUNK))
    if _header_checksum_ok(archive[:BLOCK]):  # a plain tar whose first name is "BZh..."
        return plain
    for magic, new in _FORMATS:
        if archive[: len(magic)] == magic:
            return _decompressed(archive, magic, new)
    return plain


class TarReader:
    """The tar stream of an archive, read in exact pieces and counted against ``max_bytes``.

    Decompression happens as the stream is read, and a read that would take the
    stream past ``max_bytes`` is refused before it is made.
    """

    def __init__(self, archive: Archive, max_bytes: int) -> None:
        self._pieces = _pieces(archive)
        self._buffer = bytearray()
        self._max_bytes = max_bytes
        self.consumed = 0
        """Bytes of the tar stream read so far."""

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


class TarEntry(NamedTuple):
    """One entry's header, after the extended headers that preceded it."""

    kind: bytes
    """The type flag: ``b"0"`` a file, ``b"5"`` a folder, ``b"2"`` a symbolic link..."""
    name: bytes
    """The path, as the archive spells it (nothing checked yet)."""
    size: int
    """Bytes of data that follow the header, before padding."""
    mode: int
    """The permission bits the archive asks for."""


def _bad(message: str) -> StudentMisbehaviorError:
    return StudentMisbehaviorError(message)


def shown_name(name: bytes) -> str:
    """An entry's name for a message: decoded, quoted, and cut after 100 characters."""
    text = name.decode("utf-8", "backslashreplace")
    return repr(text if len(text) <= 100 else text[:100] + "...")


def padded(size: int) -> int:
    """``size`` rounded up to whole blocks: what the data of an entry takes in the stream."""
    return -(-size // BLOCK) * BLOCK


def _number(field: bytes) -> int | None:
    """A numeric header field (octal text, or GNU base-256); None when malformed or negative."""
    if field[:1] == b"\x80":
        return int.from_bytes(field[1:], "big")
    digits = field.split(b"\0", 1)[0].strip()
    return int(digits or b"0", 8) if re.fullmatch(rb"[0-7]*", digits) else None


def _decimal(digits: bytes) -> int | None:
    """A PAX decimal number, or None when malformed or longer than any 64-bit number.

    The cap also keeps ``int`` from refusing a number past 4300 digits with a ``ValueError``.
    """
    return int(digits) if digits.isdigit() and len(digits) <= _MAX_DIGITS else None


def _header_checksum_ok(block: bytes) -> bool:
    if len(block) < BLOCK:
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
        length = _decimal(payload[position:space]) if space > 0 else None
        end = -1 if length is None else position + length
        record = payload[space + 1 : end]
        if end <= space or end > len(payload) or not record.endswith(b"\n") or b"=" not in record:
            raise _bad("submission archive has a damaged PAX extended header")
        key, _, value = record[:-1].partition(b"=")
        records[key] = value
        position = end
    return records


def _header(reader: TarReader, first: bool) -> tuple[bytes, int, int] | None:
    """The next header block with its size and mode; ``None`` at the end-of-archive block."""
    block = reader.read(BLOCK)
    if block == _ZERO_BLOCK:
        return None
    if not _header_checksum_ok(block):
        if first:
            raise _bad("submission is not a tar archive (it does not start with a tar header)")
        if len(block) < BLOCK:
            raise _bad("submission archive is truncated: it ends before its end marker")
        raise _bad(f"submission archive is damaged: no tar header at byte {reader.consumed - 512}")
    size, mode = _number(block[124:136]), _number(block[100:108])
    if size is None or mode is None:
        raise _bad("submission archive has a damaged tar header (a malformed number)")
    return block, size, mode


def _read_extended(reader: TarReader, kind: bytes, size: int, extended: dict[bytes, bytes]) -> None:
    """Read a GNU long-name or PAX header into ``extended`` (path and size overrides)."""
    if size > _MAX_EXTENDED:
        raise _bad(f"submission has a {size}-byte extended header (limit {_MAX_EXTENDED})")
    payload = reader.exact(padded(size))[:size]
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
        pax_size = _decimal(extended[b"size"])
        if pax_size is None:
            raise _bad(f"submission entry {shown_name(name)} has a malformed PAX size")
        size = pax_size
    extended.clear()
    return name, size


def tar_entries(reader: TarReader) -> Iterator[TarEntry]:
    """The entries of the stream, up to its end-of-archive block.

    The caller reads each entry's data (``padded(entry.size)`` bytes) from
    ``reader`` before asking for the next entry.
    """
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
        yield TarEntry(kind, name, size, mode)
