"""The fuzz targets: their corpora still pass, and each fuzzes for a few seconds without a crash.

The short runs are CI's share of fuzzing (about half a minute in all, two targets at
a time); longer runs are for a developer's machine (``docs/development/fuzzing.md``).
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fuzz.harness import CORPUS, Target

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ("unpack", "jobs", "transcript", "regex")
SECONDS = 12
"""How long each target fuzzes in CI."""


def target(name: str) -> Target:
    found: Target = importlib.import_module(f"fuzz.{name}").TARGET
    return found


@pytest.mark.parametrize("name", TARGETS)
def test_every_input_of_the_corpus_keeps_the_contract(name: str) -> None:
    inputs = sorted(path for path in (CORPUS / name).iterdir() if path.is_file())
    assert len(inputs) >= 10, f"fuzz/corpus/{name} has lost its seeds"
    check = target(name).check
    for path in inputs:
        check(path.read_bytes())  # raises on a broken contract


def test_the_corpus_stays_small() -> None:
    sizes = [path.stat().st_size for path in CORPUS.rglob("*") if path.is_file()]
    assert sum(sizes) < 1 << 20 and max(sizes) <= 16384


def start(name: str, tmp_path: Path) -> subprocess.Popen[str]:
    new = tmp_path / f"{name}-new"
    new.mkdir()
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            f"fuzz.{name}",
            f"-max_total_time={SECONDS}",
            f"-artifact_prefix={tmp_path}/artifact-{name}-",
            str(new),
            str(CORPUS / name),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.slow
@pytest.mark.parametrize("pair", [("unpack", "transcript"), ("jobs", "regex")])
def test_each_target_fuzzes_without_a_crash(pair: tuple[str, str], tmp_path: Path) -> None:
    runs = {name: start(name, tmp_path) for name in pair}
    for name, run in runs.items():
        out, _ = run.communicate(timeout=SECONDS + 120)
        tail = out[-6000:]
        assert run.returncode == 0, f"fuzz.{name} failed (exit {run.returncode}):\n{tail}"
        done = re.search(r"^Done (\d+) runs in (\d+) second", out, re.M)
        seeds = len(list((CORPUS / name).iterdir()))
        # Past its seeds into inputs of its own (how far depends on the machine's load).
        assert done and int(done[1]) > seeds, f"fuzz.{name} never got past its seeds:\n{tail}"
        assert " cov: " in out and not list(tmp_path.glob(f"artifact-{name}-*")), tail
