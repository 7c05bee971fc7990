"""``chalk serve`` processes on free ports, for the HTTP API's tests (``tests/server/``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from processes import ROOT, TESTS, free_port, stop

__all__ = ["ROOT", "Server", "ServerFactory"]


@dataclass
class Server:
    """A ``chalk serve`` process: its URL, its log, the key it wants (if any)."""

    proc: subprocess.Popen[bytes]
    url: str
    log: Path
    key: str | None = None

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}

    def client(self, timeout: float = 60.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers(), timeout=timeout)

    def alive(self) -> bool:
        if self.proc.poll() is not None:
            return False
        try:
            return httpx.get(f"{self.url}/health", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False


@dataclass
class ServerFactory:
    """Starts servers (``chalk serve``); stops every one at the end of the test."""

    logs: Path
    started: list[Server] = field(default_factory=list)

    def __call__(
        self,
        *,
        env: dict[str, str] | None = None,
        key: str | None = None,
        args: tuple[str, ...] = (),
        wait: bool = True,
    ) -> Server:
        port = free_port()
        log = self.logs / f"serve-{len(self.started) + 1}-{uuid.uuid4().hex[:6]}.log"
        full_env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("CHALK_")},
            "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])),
            **({"CHALK_API_KEYS": key} if key else {}),
            **(env or {}),
        }
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "chalk_client.cli", "serve", "--port", str(port), *args],
                cwd=ROOT,
                env=full_env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        server = Server(proc, f"http://127.0.0.1:{port}", log, key.split(",")[0] if key else None)
        self.started.append(server)
        if wait:
            deadline = time.monotonic() + 60
            while not server.alive():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"chalk serve did not start:\n{server.text()[-3000:]}")
                time.sleep(0.1)
        return server

    def stop_all(self) -> None:
        for server in self.started:
            stop(server.proc)
