"""Fixtures of the worker tests: both ways a ``{python}`` scoring script starts."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["warm", "cold"])
def python_start(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test with warm Python on, then off (``CHALK_WARM_PYTHON``)."""
    mode = str(request.param)
    monkeypatch.setenv("CHALK_WARM_PYTHON", "true" if mode == "warm" else "false")
    return mode
