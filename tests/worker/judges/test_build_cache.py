"""The build cache stays within its size and count, oldest builds out first, and is walked
only when it may be full (a walk per build kept made every job slower as the cache grew)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chalk_worker.judges.programs import builds
from chalk_worker.judges.programs.builds import BuildCache


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    builds._since_walk.clear()


def _keep(cache: BuildCache, tmp_path: Path, key: str, size: int) -> None:
    folder = tmp_path / f"build-{key}"
    folder.mkdir()
    (folder / "a.out").write_bytes(b"x" * size)
    cache.keep(key, folder, ["a.out"])


def _kept(cache: BuildCache) -> set[str]:
    return {name for name in os.listdir(cache.root) if not name.startswith(".")}


def test_past_its_size_the_least_recently_used_builds_go_first(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path / "cache", max_bytes=3000)
    for number, key in enumerate(["a", "b", "c"]):
        _keep(cache, tmp_path, key, 1000)
        os.utime(cache.root / key, (1000 + number, 1000 + number))
    assert _kept(cache) == {"a", "b", "c"}
    os.utime(cache.root / "a", (2000, 2000))  # used again: now the newest
    _keep(cache, tmp_path, "d", 1000)
    assert _kept(cache) == {"a", "c", "d"}


def test_past_its_count_the_oldest_builds_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(builds, "MAX_ENTRIES", 3)
    cache = BuildCache(tmp_path / "cache", max_bytes=10**9)
    for number, key in enumerate("abcde"):
        _keep(cache, tmp_path, key, 10)
        os.utime(cache.root / key, (1000 + number, 1000 + number))
    assert _kept(cache) == {"c", "d", "e"}


def test_the_cache_is_walked_only_when_it_may_be_full_or_is_due(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    walks = []
    trim = BuildCache._trim

    def counted(self: BuildCache) -> None:
        walks.append(len(_kept(self)))
        trim(self)

    monkeypatch.setattr(BuildCache, "_trim", counted)
    monkeypatch.setattr(builds, "TRIM_EVERY", 10)
    cache = BuildCache(tmp_path / "cache", max_bytes=10**9)
    for number in range(25):
        _keep(cache, tmp_path, f"k{number}", 10)
    assert walks == [1, 11, 21]  # the first build, then every tenth
    small = BuildCache(tmp_path / "small", max_bytes=250)
    for number in range(5):
        _keep(small, tmp_path, f"s{number}", 100)
    assert len(_kept(small)) <= 2  # full: walked and trimmed before its turn
