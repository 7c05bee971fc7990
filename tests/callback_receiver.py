"""A receiver of batch callbacks on loopback: answers as a test tells it, keeps every request.

The fixture that hands it to tests is ``callback_receiver`` in ``conftest.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Received:
    """One request the receiver got, and the status it answered."""

    at: float
    """When it arrived (``time.monotonic()``)."""
    path: str
    headers: dict[str, str]
    """Its headers, names in lower case."""
    body: bytes
    status: int


class CallbackReceiver:
    """An HTTP server on ``127.0.0.1`` that answers ``POST``s with the statuses it is given.

    ``answers`` are the statuses of the first requests, in order; later ones get
    ``then``. A 3xx answer points (``Location``) at ``/moved`` of the same server.
    While ``hold`` is clear, requests wait (a slow receiver) and then get
    ``held_status``.
    """

    def __init__(self, answers: Iterable[int] = (), then: int = 200) -> None:
        self.answers = list(answers)
        self.then = then
        self.requests: list[Received] = []
        self.hold = threading.Event()
        self.hold.set()
        self.held_status = 500
        self.arrived = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.arrived:
                    status = receiver.answers.pop(0) if receiver.answers else receiver.then
                    held = not receiver.hold.is_set()
                    if held:
                        status = receiver.held_status
                    receiver.requests.append(
                        Received(
                            time.monotonic(),
                            self.path,
                            {k.lower(): v for k, v in self.headers.items()},
                            body,
                            status,
                        )
                    )
                    receiver.arrived.notify_all()
                if held:
                    receiver.hold.wait(60)
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", f"http://127.0.0.1:{receiver.port}/moved")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        """Where callbacks are to be sent."""
        return f"http://127.0.0.1:{self.port}/hook?token=t1"

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Received]:
        """The requests once there are ``count`` of them; ``AssertionError`` after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self.arrived:
            while len(self.requests) < count:
                left = deadline - time.monotonic()
                assert left > 0, f"{len(self.requests)} of {count} callback requests arrived"
                self.arrived.wait(left)
            return list(self.requests)

    def delivered(self) -> list[Received]:
        """The requests answered with a 2xx."""
        return [r for r in self.requests if 200 <= r.status < 300]

    def close(self) -> None:
        """Stop serving (requests held are let go)."""
        self.hold.set()
        self.server.shutdown()
        self.server.server_close()
