"""Tar archives built by hand, so tests can say things ``tarfile`` would not write."""

from __future__ import annotations

import io
import tarfile
import zlib
from collections.abc import Mapping
from typing import Any

GIB = 1 << 30


def header(
    name: bytes,
    *,
    kind: bytes = b"0",
    size: int = 0,
    mode: int = 0o644,
    linkname: bytes = b"",
    size_field: bytes | None = None,
    extra: dict[int, bytes] | None = None,
) -> bytes:
    """One ustar header block, built by hand so it can say things tarfile would not write."""
    block = bytearray(512)
    block[0 : len(name)] = name
    block[100:108] = b"%07o\0" % mode
    block[108:124] = b"0000000\0" * 2
    block[124:136] = size_field if size_field is not None else b"%011o\0" % size
    block[136:148] = b"%011o\0" % 1_700_000_000
    block[156:157] = kind
    block[157 : 157 + len(linkname)] = linkname
    block[257:265] = b"ustar\x0000"
    for offset, value in (extra or {}).items():
        block[offset : offset + len(value)] = value
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def member(name: bytes, data: bytes = b"", **fields: Any) -> bytes:
    """A header, its data and the padding to the next block."""
    return header(name, size=len(data), **fields) + data + bytes(-len(data) % 512)


def tar(*members: bytes) -> bytes:
    """Members followed by the end-of-archive marker."""
    return b"".join(members) + bytes(1024)


def pax(**records: str) -> bytes:
    """The payload of a PAX extended header ("%d key=value\\n", the length counting itself)."""
    out = b""
    for key, value in records.items():
        body = f" {key.replace('__', '.')}={value}\n".encode()
        length = len(body) + 1
        while len(str(length).encode()) + len(body) != length:
            length += 1
        out += str(length).encode() + body
    return out


def build(
    files: Mapping[str, tuple[bytes | None, int]], mode: Any = "w:gz", **options: Any
) -> bytes:
    """An archive written by tarfile: ``name -> (data, mode)``, data None for a folder."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode, **options) as archive:
        for name, (data, file_mode) in files.items():
            info = tarfile.TarInfo(name)
            info.mode = file_mode
            if data is None:
                info.type = tarfile.DIRTYPE
            else:
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data or b""))
    return buffer.getvalue()


def gzip_bomb(size: int = GIB) -> bytes:
    """One file of ``size`` zero bytes in a gzip tar, streamed through zlib (~1 MB per GiB)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    pieces = [compressor.compress(header(b"zeros.bin", size=size))]
    zeros = bytes(1 << 20)
    pieces += [compressor.compress(zeros) for _ in range(size // len(zeros))]
    pieces += [compressor.compress(bytes(1024)), compressor.flush()]
    return b"".join(pieces)


def many_tiny_files(count: int) -> bytes:
    """A gzip tar of ``count`` one-byte files."""
    compressor = zlib.compressobj(1, zlib.DEFLATED, 31)
    body = b"x".ljust(512, b"\0")
    pieces = [compressor.compress(header(b"f%06d" % i, size=1) + body) for i in range(count)]
    return b"".join([*pieces, compressor.compress(bytes(1024)), compressor.flush()])
