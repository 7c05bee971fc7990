"""A program the sandbox's user cannot reach: the error names the folder in its way."""

from __future__ import annotations

import dataclasses
import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from chalk_worker.sandbox import detect_layers
from chalk_worker.sandbox.direct import run_direct
from chalk_worker.sandbox.process import TOKEN_VARIABLE, ProcessLimits, start_error
from chalk_worker.sandbox.slots import Slot


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A folder every user can reach (pytest's own sits under a folder of mode 0700)."""
    with tempfile.TemporaryDirectory(prefix="chalk-start-error-", dir="/tmp") as folder:
        path = Path(folder)
        path.chmod(0o755)
        yield path


def closed_program(tmp_path: Path) -> Path:
    """An executable script others could run, in a folder of mode 0700 (a home, say)."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    program = home / "grade.sh"
    program.write_text("#!/bin/sh\necho graded\n")
    program.chmod(0o755)
    return program


def test_a_permission_refused_names_the_closed_folder(tmp_path):
    program = closed_program(tmp_path)
    said = start_error(str(program), errno.EACCES, "Permission denied")
    assert said.startswith(f"could not start {str(program)!r}: Permission denied")
    assert f"the folder {program.parent} on its way is closed to other users (mode 700)" in said
    assert "chmod o+x" in said
    # A link to it: the folder is found on the link's target.
    link = tmp_path / "python"
    link.symlink_to(program)
    assert str(program.parent) in start_error(str(link), errno.EACCES, "Permission denied")


def test_other_failures_say_only_the_reason(tmp_path):
    program = closed_program(tmp_path)
    assert start_error(str(program), errno.ENOENT, "No such file or directory") == (
        f"could not start {str(program)!r}: No such file or directory"
    )
    # Refused with every folder open and the program open to all: nothing to point at.
    open_program = tmp_path / "open.sh"
    open_program.write_text("")
    open_program.chmod(0o755)
    assert start_error(str(open_program), errno.EACCES, "Permission denied") == (
        f"could not start {str(open_program)!r}: Permission denied"
    )


def test_a_program_only_its_owner_may_run_is_named_as_such(tmp_path):
    program = tmp_path / "grade.sh"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o744)
    said = start_error(str(program), errno.EACCES, "Permission denied")
    assert said.endswith(
        ": other users may not run it (mode 744) and scripts run as an "
        "unprivileged user; chmod o+rx it"
    )
    assert start_error("grade.sh", errno.EACCES, "x") == "could not start 'grade.sh': x"


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the program as another user: needs root")
def test_a_run_without_bubblewrap_says_which_folder_it_could_not_enter(tmp_path):
    program = closed_program(tmp_path)
    scratch = tmp_path / "scratch"
    scratch.mkdir(mode=0o777)
    layers = dataclasses.replace(detect_layers(), bwrap=None)
    outcome = run_direct(
        [str(program)],
        cwd=scratch,
        env={"PATH": "/usr/bin:/bin", TOKEN_VARIABLE: os.urandom(8).hex()},
        limits=ProcessLimits(wall_s=10, file_size_bytes=1 << 20, memory_bytes=256 << 20),
        layers=layers,
        readonly=[],
        scratch=scratch,
        slot=Slot(number=0, uid=61990, gid=61990),
        cgroups=None,
    )
    assert outcome.returncode is None
    assert outcome.start_error is not None
    assert f"the folder {program.parent} on its way is closed to other users" in outcome.start_error
