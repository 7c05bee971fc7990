"""Unpacking untrusted submissions: what a normal archive gives, and what a hostile one cannot."""

from __future__ import annotations

import bz2
import lzma
import os
import random
import stat
import subprocess
import tarfile
import time
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path

import archives
import pytest
from archives import GIB, build, header, member, pax, tar

from chalk_client.errors import StudentMisbehaviorError
from chalk_worker.sandbox.collect import unpack_submission

LIMITS = {"max_bytes": 256 * 1024 * 1024, "max_entries": 10_000, "max_depth": 32}


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    """An empty folder to unpack into, alone inside ``tmp_path / "box"``."""
    folder = tmp_path / "box" / "dest"
    folder.mkdir(parents=True)
    return folder


def refuse(archive: bytes, dest: Path, match: str, **limits: int) -> None:
    """Assert the archive is misbehaviour, and that nothing was left in or around ``dest``."""
    with pytest.raises(StudentMisbehaviorError, match=match):
        unpack_submission(archive, dest, **{**LIMITS, **limits})
    assert os.listdir(dest.parent.parent) == ["box"]
    assert os.listdir(dest.parent) == ["dest"]
    assert os.listdir(dest) == []


def still_unpacks(tmp_path: Path) -> None:
    """A normal archive unpacks fine after a hostile one, in the same process."""
    again = tmp_path / "again"
    again.mkdir()
    files = unpack_submission(build({"ok/answer.txt": (b"42\n", 0o644)}), again, **LIMITS)
    assert files == [again / "ok" / "answer.txt"]
    assert files[0].read_bytes() == b"42\n"


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


# --- what a student relies on -------------------------------------------------------------


def test_nested_gzip_archive_unpacks_with_safe_modes(dest: Path) -> None:
    archive = build(
        {
            "pkg/": (None, 0o700),
            "pkg/run.sh": (b"#!/bin/sh\necho hi\n", 0o4755),
            "pkg/sub/": (None, 0o1777),
            "pkg/sub/data.bin": (bytes(range(256)) * 300, 0o2640),
            "implied/folder/notes.txt": (b"notes", 0o600),
            "answer.txt": (b"3.12.11", 0o644),
        }
    )
    files = unpack_submission(archive, dest, **LIMITS)
    assert files == sorted(
        dest / name
        for name in ["answer.txt", "implied/folder/notes.txt", "pkg/run.sh", "pkg/sub/data.bin"]
    )
    assert (dest / "pkg/run.sh").read_bytes() == b"#!/bin/sh\necho hi\n"
    assert (dest / "pkg/sub/data.bin").read_bytes() == bytes(range(256)) * 300
    assert (dest / "implied/folder/notes.txt").read_bytes() == b"notes"
    assert mode_of(dest / "pkg/run.sh") == 0o755  # setuid dropped, execute kept
    assert mode_of(dest / "pkg/sub/data.bin") == 0o644  # setgid dropped
    assert mode_of(dest / "implied/folder/notes.txt") == 0o644
    for folder in ["pkg", "pkg/sub", "implied", "implied/folder"]:
        assert mode_of(dest / folder) == 0o755  # sticky bit dropped, 0o700 opened up


@pytest.mark.parametrize("mode", ["w", "w:gz", "w:bz2", "w:xz"])
def test_every_compression_unpacks(dest: Path, mode: str) -> None:
    archive = build({"a/b.txt": (b"b" * 70_000, 0o644), "c.txt": (b"", 0o644)}, mode)
    assert unpack_submission(archive, dest, **LIMITS) == [dest / "a/b.txt", dest / "c.txt"]
    assert (dest / "a/b.txt").read_bytes() == b"b" * 70_000


@pytest.mark.parametrize("tar_format", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_long_names_unpack_in_gnu_and_pax_archives(dest: Path, tar_format: int) -> None:
    name = "/".join(["folder-with-a-long-name-" + str(i) for i in range(8)]) + "/f.txt"
    archive = build({name: (b"deep", 0o644)}, "w", format=tar_format)
    assert unpack_submission(archive, dest, **LIMITS) == [dest / name]
    assert (dest / name).read_bytes() == b"deep"


def test_dot_slash_archive_of_a_whole_folder_unpacks(dest: Path) -> None:
    archive = build({".": (None, 0o755), "./x/y.txt": (b"y", 0o644)})
    assert unpack_submission(archive, dest, **LIMITS) == [dest / "x/y.txt"]


def test_trailing_garbage_after_the_end_marker_is_ignored(dest: Path) -> None:
    archive = tar(member(b"a.txt", b"a")) + b"garbage that is not tar" * 100
    assert unpack_submission(archive, dest, **LIMITS) == [dest / "a.txt"]


def test_archive_with_no_entries_unpacks_to_nothing(dest: Path) -> None:
    assert unpack_submission(build({}), dest, **LIMITS) == []


# --- escaping the folder ------------------------------------------------------------------


def test_absolute_path_is_misbehaviour(dest: Path, tmp_path: Path) -> None:
    target = str(tmp_path / "pwned.txt").encode()
    refuse(tar(member(target, b"x")), dest, "absolute path")
    still_unpacks(tmp_path)


@pytest.mark.parametrize("name", [b"../pwned.txt", b"a/../../pwned.txt", b"./a/b/../../../x"])
def test_dot_dot_is_misbehaviour(dest: Path, name: bytes) -> None:
    refuse(tar(member(b"a/", kind=b"5"), member(name, b"x")), dest, "leaves the submission folder")


def test_symlink_out_is_misbehaviour(dest: Path, tmp_path: Path) -> None:
    archive = tar(
        member(b"evil", kind=b"2", linkname=b"../.."),
        member(b"evil/pwned.txt", b"x"),
    )
    refuse(archive, dest, "'evil' is a symbolic link")
    still_unpacks(tmp_path)


def test_hardlink_out_is_misbehaviour(dest: Path) -> None:
    archive = tar(member(b"passwd", kind=b"1", linkname=b"../../outside"), member(b"passwd", b"x"))
    refuse(archive, dest, "'passwd' is a hard link")


@pytest.mark.parametrize(
    ("kind", "what"),
    [(b"6", "a FIFO"), (b"3", "a character device"), (b"4", "a block device"), (b"V", "type")],
)
def test_special_files_are_misbehaviour(dest: Path, kind: bytes, what: str) -> None:
    devices = {329: b"0000001\0", 337: b"0000003\0"}
    refuse(tar(member(b"special", kind=kind, extra=devices)), dest, what)


# --- exhausting the worker ----------------------------------------------------------------


@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    """A 1 GiB file of zeros in a gzip tar: about 1 MB compressed."""
    return archives.gzip_bomb()


def test_gzip_bomb_is_refused_quickly_in_little_memory(
    gzip_bomb: bytes, dest: Path, tmp_path: Path
) -> None:
    assert len(gzip_bomb) < 2_000_000
    tracemalloc.start()
    started = time.perf_counter()
    try:
        refuse(gzip_bomb, dest, "larger than 268435456 bytes unpacked")
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < 2
    assert peak < 8 * 1024 * 1024
    still_unpacks(tmp_path)


def test_many_files_adding_up_past_max_bytes_are_refused(dest: Path) -> None:
    megabyte = bytes(1 << 20)
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
    pieces = [compressor.compress(member(b"f%03d" % i, megabyte)) for i in range(64)]
    archive = b"".join([*pieces, compressor.compress(bytes(1024)), compressor.flush()])
    refuse(archive, dest, "larger than 8388608 bytes", max_bytes=8 << 20)


def test_headers_count_against_max_bytes(dest: Path) -> None:
    archive = tar(*(member(b"empty%d" % i) for i in range(200)))
    refuse(archive, dest, "larger than 65536 bytes", max_bytes=65536)


def test_one_file_bigger_than_max_bytes_is_refused_before_writing(dest: Path) -> None:
    archive = build({"big.bin": (os.urandom(100_000), 0o644)})
    refuse(archive, dest, "larger than 65536 bytes unpacked", max_bytes=65536)


@pytest.mark.parametrize("kind", [b"L", b"K", b"x", b"g"])
@pytest.mark.parametrize("encoding", ["octal", "base-256"])
def test_huge_extended_header_is_refused_unread(
    dest: Path, tmp_path: Path, kind: bytes, encoding: str
) -> None:
    size = 2 * GIB
    field = b"%011o\0" % size if encoding == "octal" else b"\x80" + size.to_bytes(11, "big")
    archive = header(b"././@LongLink", kind=kind, size_field=field) + b"a" * 4096
    tracemalloc.start()
    started = time.perf_counter()
    try:
        refuse(archive, dest, "extended header")
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < 0.5
    assert peak < 1024 * 1024
    still_unpacks(tmp_path)


def test_gnu_sparse_member_is_misbehaviour(dest: Path) -> None:
    ten_gib = b"\x80" + (10 * GIB).to_bytes(11, "big")
    sparse_map = {386: b"\x80" + (10 * GIB - 512).to_bytes(11, "big"), 398: b"%011o\0" % 512}
    archive = tar(member(b"sparse.bin", b"x" * 512, kind=b"S", extra={483: ten_gib, **sparse_map}))
    refuse(archive, dest, "sparse file")


def test_pax_sparse_member_is_misbehaviour(dest: Path) -> None:
    records = pax(
        GNU__sparse__major="1",
        GNU__sparse__minor="0",
        GNU__sparse__name="sparse.bin",
        GNU__sparse__realsize=str(10 * GIB),
    )
    sparse_map = b"1\n10737418239\n1\n".ljust(512, b"\0") + b"x".ljust(512, b"\0")
    archive = tar(
        member(b"./PaxHeaders/sparse.bin", records, kind=b"x"),
        member(b"./GNUSparseFile.0/sparse.bin", sparse_map),
    )
    refuse(archive, dest, "sparse file")


@pytest.mark.parametrize(
    ("records", "match"),
    [
        # A record's length of 4,400 digits: Python's int() refuses past 4,300 (ValueError).
        (b"9" * 4400 + b" path=x\n", "damaged PAX extended header"),
        (pax(size="1" * 4400), "malformed PAX size"),
        (pax(size="1" * 21), "malformed PAX size"),
    ],
    ids=["record-length", "size", "size-past-64-bits"],
)
def test_pax_numbers_of_too_many_digits_are_misbehaviour(
    dest: Path, records: bytes, match: str
) -> None:
    archive = tar(member(b"PaxHeader", records, kind=b"x"), member(b"s.txt", b"x"))
    refuse(archive, dest, match)


def test_a_pax_size_of_twenty_digits_is_only_too_large(dest: Path) -> None:
    archive = tar(member(b"PaxHeader", pax(size="9" * 20), kind=b"x"), member(b"s.txt", b"x"))
    refuse(archive, dest, "larger than")


def test_hundred_thousand_tiny_files_are_refused_at_max_entries(dest: Path) -> None:
    archive = archives.many_tiny_files(100_000)
    started = time.perf_counter()
    refuse(archive, dest, "more than 10000 entries")
    # Refused in seconds (3-6 s on a shared 2-core machine), not by writing every file:
    # the bound only catches a refusal that comes far too late.
    assert time.perf_counter() - started < 30


def test_two_thousand_deep_folders_are_refused_at_max_depth(dest: Path) -> None:
    folders = {"d/" * depth: (None, 0o755) for depth in range(1, 2001)}
    archive = build(folders, "w:gz", format=tarfile.PAX_FORMAT)
    refuse(archive, dest, "33 levels deep")


def test_implied_folders_count_as_entries(dest: Path) -> None:
    refuse(tar(member(b"a/b/c/d.txt", b"d")), dest, "more than 3 entries", max_entries=3)


# --- confusing the unpacker ---------------------------------------------------------------


def test_duplicate_names_are_misbehaviour(dest: Path) -> None:
    refuse(tar(member(b"a.txt", b"1"), member(b"./a.txt", b"2")), dest, "'./a.txt' appears twice")


@pytest.mark.parametrize(
    ("second", "message"),
    [
        (member(b"a/", kind=b"5"), "is a folder but an earlier entry made it a file"),
        (member(b"a/b.txt", b"b"), "needs folder 'a', which is a file"),
    ],
)
def test_file_where_a_folder_is_needed_is_misbehaviour(
    dest: Path, second: bytes, message: str
) -> None:
    refuse(tar(member(b"a", b"a file"), second), dest, message)


def test_folder_then_file_of_the_same_name_is_misbehaviour(dest: Path) -> None:
    archive = tar(member(b"a/b.txt", b"b"), member(b"a", b"a file"))
    refuse(archive, dest, "is a file but an earlier entry made it a folder")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (b"", "empty name"),
        (b"a\0b", "NUL byte"),
        (b"x" * 256, "longer than 255 bytes"),
        (b"x/" * 2100 + b"x", "longer than 4096 bytes"),
    ],
)
def test_bad_names_are_misbehaviour(dest: Path, name: bytes, message: str) -> None:
    long_name = member(b"././@LongLink", name + b"\0", kind=b"L")
    refuse(tar(long_name, member(b"placeholder", b"x")), dest, message)


@pytest.mark.parametrize(
    "archive",
    [
        b"this is a text file, not an archive\n" * 40,
        random.Random(0).randbytes(5000),
        b"tiny",
        bytes(100),
    ],
)
def test_bytes_that_are_no_archive_are_misbehaviour(dest: Path, archive: bytes) -> None:
    refuse(archive, dest, "submission is not a tar archive")


def test_empty_bytes_are_misbehaviour(dest: Path) -> None:
    refuse(b"", dest, "submission is not a tar archive")


@pytest.mark.parametrize(
    "archive",
    [
        b"\x1f\x8b\x08\x00" + b"not deflate at all" * 20,
        b"BZh9" + b"not bzip2" * 20,
        b"\xfd7zXZ\x00" + b"not xz" * 20,
        zlib.compress(b"just text\n" * 100, wbits=31),
    ],
)
def test_damaged_or_non_tar_compressed_data_is_misbehaviour(dest: Path, archive: bytes) -> None:
    refuse(archive, dest, "damaged|not a tar archive")


@pytest.mark.parametrize(
    "compress",
    [
        lambda data: data,
        lambda data: zlib.compress(data, wbits=31),
        bz2.compress,
        lzma.compress,
    ],
)
def test_truncated_archive_is_misbehaviour(
    dest: Path, tmp_path: Path, compress: Callable[[bytes], bytes]
) -> None:
    whole = compress(tar(member(b"a.txt", os.urandom(4000)), member(b"b.txt", b"b")))
    refuse(whole[: len(whole) // 2], dest, "truncated")
    still_unpacks(tmp_path)


def test_a_full_disk_is_misbehaviour_and_leaves_nothing(tmp_path: Path) -> None:
    # The reference counts a destination error the student can provoke (a full disk)
    # as tampering: the job scores 0 with a reason, the worker goes on.
    box = tmp_path / "box"
    box.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(box)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        dest = box / "dest"
        dest.mkdir()
        archive = build({"big.bin": (os.urandom(3 * 1024 * 1024), 0o644)})
        with pytest.raises(
            StudentMisbehaviorError, match=r"'big\.bin' could not be written: the disk is full"
        ):
            unpack_submission(archive, dest, **LIMITS)
        assert os.listdir(dest) == []
    finally:
        subprocess.run(["umount", str(box)], check=True)
    still_unpacks(tmp_path)
