"""The fuzz harness and the targets' own checks: each catches what it is there to catch."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from archives import member, tar

from chalk_worker.sandbox.tarstream import TarReader, tar_entries
from fuzz import unpack
from fuzz.harness import CORPUS, ContractBroken, quiet
from fuzz.jobs import TARGET as JOBS
from fuzz.regex import parts

ROOT = Path(__file__).resolve().parents[2]


def test_a_run_without_folders_reads_the_corpus_and_writes_elsewhere() -> None:
    argv = JOBS.libfuzzer_argv(["-max_total_time=5"])
    assert argv[-2:] == [str(JOBS.scratch), str(CORPUS / "jobs")]
    assert "-max_len=8192" in argv and any(arg.startswith("-dict=") for arg in argv)
    assert argv.index("-max_len=8192") < argv.index("-max_total_time=5")  # the caller's win
    assert JOBS.libfuzzer_argv(["crash-1234"])[-1] == "crash-1234"


def test_help_names_the_flags_the_docs_use() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fuzz.unpack", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    for flag in ("-max_total_time", "-runs", "-merge", "-artifact_prefix", "-timeout"):
        assert flag in done.stdout
    assert "fuzz/corpus/unpack/" in done.stdout and "StudentMisbehaviorError" in done.stdout


def test_quiet_catches_printing_and_warnings_but_not_a_pattern_s_own() -> None:
    with pytest.raises(ContractBroken, match="printed 'x"), quiet("print"):
        print("x")
    with pytest.raises(ContractBroken, match="warned"), quiet("warn"):
        warnings.warn("deprecated", DeprecationWarning, stacklevel=1)
    with quiet("a pattern's syntax"):
        warnings.warn("Possible nested set at position 1", FutureWarning, stacklevel=1)


def test_the_unpack_watch_sees_writes_outside_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest = tmp_path / "submission"
    dest.mkdir()
    monkeypatch.chdir(tmp_path)
    with unpack._watching(dest):
        (dest / "inside.txt").write_text("fine")
        os.mkdir("inside", dir_fd=os.open(dest, os.O_RDONLY))
        (tmp_path / "outside.txt").write_text("not fine")
        os.mkdir("in-the-working-folder")
        os.symlink("/etc", dest / "link")
    problems = unpack._watch.problems
    assert len(problems) == 3, problems
    assert "outside.txt" in problems[0] and "working folder" in problems[1]
    assert problems[2].startswith("os.symlink")


def test_what_the_unpacker_leaves_is_checked(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    (dest / "a").mkdir(parents=True, mode=0o755)
    (dest / "a").chmod(0o755)
    (dest / "a" / "f").write_text("x")
    (dest / "a" / "f").chmod(0o644)
    assert unpack._left(dest) == ([dest / "a" / "f"], 2, 1)
    (dest / "link").symlink_to("/etc")
    with pytest.raises(ContractBroken, match="neither a file nor a folder"):
        unpack._left(dest)


def test_checksums_made_right_turn_a_damaged_header_into_an_entry() -> None:
    archive = bytearray(tar(member(b"a.txt", b"hello")))
    archive[0:5] = b"b.txt"  # the checksum no longer holds
    fixed = unpack.with_checksums(bytes(archive))
    entry = next(tar_entries(TarReader(fixed, 1 << 20)))
    assert entry.name == b"b.txt" and entry.size == 5


def test_the_regex_target_reads_patterns_and_text() -> None:
    assert parts(b'a+\0{"pattern": "x", "flags": ["DOTALL"]}\0the text') == (
        ["a+", {"pattern": "x", "flags": ["DOTALL"]}],
        "the text",
    )
    assert parts(b"only a pattern") == (["only a pattern"], "")
    assert parts(b"\xff\0t") == (["\udcff"], "t")
