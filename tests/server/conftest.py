"""Fixtures of the HTTP API's tests: ``chalk serve`` processes, stopped afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from servers import Server, ServerFactory


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[ServerFactory]:
    """Start ``chalk serve`` processes for this test."""
    factory = ServerFactory(tmp_path)
    yield factory
    factory.stop_all()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One embedded ``chalk serve`` (no key, loopback) for a module's tests."""
    factory = ServerFactory(tmp_path_factory.mktemp("serve"))
    yield factory()
    factory.stop_all()
