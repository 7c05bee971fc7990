"""The sandbox probe: an installed bubblewrap that fails once is tried again, and one that
keeps failing is reported with what it said (never silently dropped)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from chalk_worker.sandbox import probe


def fake_bwrap(tmp_path: Path, failures: int) -> str:
    """A ``bwrap`` that exits 1 with a message its first ``failures`` times, then 0."""
    count = tmp_path / "count"
    count.write_text("0")
    script = tmp_path / "bwrap"
    script.write_text(
        "#!/bin/sh\n"
        f'n=$(cat "{count}"); echo $((n + 1)) > "{count}"\n'
        f'if [ "$n" -lt {failures} ]; then echo "bwrap: Creating new namespace failed" >&2; '
        "exit 1; fi\n"
        "exit 0\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe.time, "sleep", lambda _s: None)


def test_a_bubblewrap_that_fails_once_is_used(tmp_path: Path) -> None:
    assert probe._bwrap_works(fake_bwrap(tmp_path, failures=1)) is None
    assert (tmp_path / "count").read_text().strip() == "2"


def test_a_bubblewrap_that_keeps_failing_is_reported_with_its_words(tmp_path: Path) -> None:
    why = probe._bwrap_works(fake_bwrap(tmp_path, failures=probe.PROBE_TRIES))
    assert why is not None and "Creating new namespace failed" in why
    layers = probe.SandboxLayers(
        root=True,
        bwrap=None,
        setpriv=None,
        cgroups=probe.CgroupSupport(None, None, None),
        bwrap_refused=why,
    )
    said = layers.missing["namespaces"]
    assert "installed but failed its probe" in said and "Creating new namespace" in said
