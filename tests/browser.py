"""A real headless Chromium, driven over the DevTools protocol on a pipe (no extra package).

``Chromium`` starts Debian's ``chromium`` with ``--remote-debugging-pipe``: it reads
commands, JSON objects ended by a NUL byte, on its fd 3 and answers on its fd 4.
``open(url)`` loads a page in a new tab; ``evaluate(js)`` runs an expression there
and returns its value, as a user's clicks and keystrokes would run the page's code.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from processes import need

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
]


def chromium_path() -> str:
    """Debian's ``chromium``; skips the test (fails it under CI) when missing."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        need("chromium (apt-get install chromium)")
    assert found is not None
    return found


class Chromium:
    """One headless browser with one tab; a context manager that stops it at the end."""

    def __init__(self, profile: Path, log: Path) -> None:
        self._commands_read, self._commands = os.pipe()
        self._events, self._events_write = os.pipe()
        child_in, child_out = self._commands_read, self._events_write

        def fds() -> None:  # in the child: its fd 3 reads commands, its fd 4 answers
            read, write = os.dup(child_in), os.dup(child_out)
            os.dup2(read, 3)
            os.dup2(write, 4)

        with log.open("wb") as errors:
            self.proc = subprocess.Popen(
                [chromium_path(), *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                preexec_fn=fds,
                close_fds=False,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=errors,
            )
        os.close(self._commands_read)
        os.close(self._events_write)
        self._buffer = b""
        self._next = 0
        self.session: str | None = None

    def send(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30) -> Any:
        """Send one command (to the tab once one is open) and return its result."""
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if self.session is not None and not method.startswith("Target."):
            message["sessionId"] = self.session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._next:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply["result"]
            ready, _, _ = select.select([self._events], [], [], 0.2)
            if ready:
                chunk = os.read(self._events, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed its DevTools pipe")
                self._buffer += chunk
        raise TimeoutError(f"no answer to {method} within {timeout} s")

    def open(self, url: str) -> None:
        """Open ``url`` in a new tab and attach to it."""
        target = self.send("Target.createTarget", {"url": url})["targetId"]
        attached = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})
        self.session = attached["sessionId"]

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the tab (an exception raises)."""
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 20) -> Any:
        """Evaluate ``expression`` until it is truthy; return that value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
            except RuntimeError:
                value = None
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(f"{expression!r} stayed false for {timeout} s")

    def __enter__(self) -> Chromium:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        os.close(self._commands)
        os.close(self._events)
        self.proc.kill()
        self.proc.wait(30)
