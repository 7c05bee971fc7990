"""A private ``redis-server`` on a free loopback port, for tests, benchmarks and demos.

One starter for all of them: a server of its own (its own folder, so no
``dump.rdb`` lying where it starts is loaded), without persistence unless
asked, with 64 databases so tests can each take one.

    with redis_server() as url:
        client = ChalkClient(url)

``start_redis`` and ``stop`` are the parts, for a test that stops a server and
starts it again on the same port (a restart, a crash, a late Redis).
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, timeout: float = 10.0) -> bool:
    """Whether something accepts connections on ``port`` within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def start_redis(
    port: int,
    workdir: Path,
    *,
    aof: bool = False,
    fsync: str = "everysec",
    args: tuple[str, ...] = (),
) -> subprocess.Popen[bytes]:
    """Start redis-server on ``port`` and wait until it answers.

    It keeps its files in ``workdir``: nothing on disk unless ``aof`` (append-only
    file, synced as ``fsync`` says). ``args`` are more of its flags
    (``("--replicaof", host, port)`` makes it a replica).
    """
    if shutil.which("redis-server") is None:
        raise FileNotFoundError(
            "redis-server is not installed (Debian and Ubuntu: apt-get install redis-server)"
        )
    persistence = ["--appendonly", "yes", "--appendfsync", fsync] if aof else []
    # fmt: off
    command = [
        "redis-server",
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--save", "",
        "--appendonly", "no",
        "--dir", str(workdir),
        "--databases", "64",
        *persistence,
        *args,
    ]
    # fmt: on
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    if not wait_port(port):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"redis-server did not start on port {port}")
    return proc


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    """Stop a process with ``sig`` (SIGKILL for a crash); killed if it takes over 20 s."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def redis_server(*args: str) -> Iterator[str]:
    """A private redis-server for the ``with`` block; yields its URL (database 0).

    ``args`` are more of its flags. The server and its folder are gone afterwards.
    """
    with tempfile.TemporaryDirectory(prefix="chalk-redis-") as workdir:
        port = free_port()
        proc = start_redis(port, Path(workdir), args=args)
        try:
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            stop(proc)
