"""Processes the cluster tests start: redis-server on free ports, and how to stop them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI") == "true"


def need(what: str) -> None:
    """Skip the test for lack of ``what``, or fail under CI."""
    if IN_CI:
        pytest.fail(f"{what} is required under CI=true")
    pytest.skip(f"{what} is not available")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def start_redis(
    port: int, workdir: Path, *, aof: bool = False, fsync: str = "everysec"
) -> subprocess.Popen[bytes]:
    """A redis-server on ``port``: without persistence, or with AOF (fsync ``fsync``)."""
    persistence = ["--appendonly", "yes", "--appendfsync", fsync] if aof else []
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
            "--databases",
            "64",
            *persistence,
        ],
        stdout=subprocess.DEVNULL,
    )
    if not wait_port(port):
        proc.kill()
        raise RuntimeError(f"redis-server did not start on port {port}")
    return proc


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
