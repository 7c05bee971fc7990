"""A fake OpenAI-compatible server on loopback: real HTTP, real sockets, scriptable faults.

Shipped in the package (standard library only) so that the tests, the
benchmarks (``bench/rubric.py``) and users testing their own rubric judges
grade against one and the same server, through the real ``openai`` client.

It speaks ``POST /v1/chat/completions`` well enough for the official ``openai``
client. By default a criterion is met when the first user message of the
request contains ``(met)``; replies are JSON verdicts when the request asks for
a JSON schema, ``YES: ...``/``NO: ...`` text otherwise. Tests change that with
``latency_s``, ``structured=False`` (a server that answers 400 to
``response_format``), ``faults`` (replies used once each, in order, by the next
requests) and ``answer`` (a function choosing the reply of every request).

Every request is recorded; ``max_in_flight`` is the most requests the server
was handling at once and ``connections`` the TCP connections clients opened.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from chalk_client import ChalkSettings

HOST = "127.0.0.1"


@dataclass
class Reply:
    """One scripted reply. Fields left ``None`` take the server's normal answer."""

    status: int = 200
    content: str | None = None
    """The assistant message's content (``None``: the normal verdict)."""
    body: bytes | None = None
    """A raw response body, sent as is (for malformed replies)."""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float | None = None
    """Seconds to wait before answering (``None``: the server's latency)."""


@dataclass
class Seen:
    """One request as the server received it."""

    body: dict[str, Any]
    started: float
    connection: tuple[str, int]
    raw: bytes = b""
    """The request body as sent."""
    path: str = ""
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def prompt(self) -> str:
        """The text of every message of the request, joined."""
        return "\n".join(str(m.get("content")) for m in self.body.get("messages", []))

    @property
    def first_user_message(self) -> str:
        """The first user message: the grading prompt, without any follow-up."""
        users = [m for m in self.body.get("messages", []) if m.get("role") == "user"]
        return str(users[0].get("content")) if users else ""

    @property
    def structured(self) -> bool:
        """Whether the request asked for structured output."""
        return "response_format" in self.body


def settings_for(url: str, **overrides: Any) -> ChalkSettings:
    """Settings pointing rubric judges at ``url``, with no verdict cache and 2 retries."""
    values: dict[str, Any] = {
        "llm_base_url": url,
        "llm_api_key": "test-key",
        "llm_max_retries": 2,
        "rubric_cache_entries": 0,
        "rubric_deadline_s": 20,
    }
    return ChalkSettings(**{**values, **overrides})


def default_met(seen: Seen) -> bool:
    """The default oracle: met when the prompt's first user message says ``(met)``."""
    return "(met)" in seen.first_user_message


class FakeOpenAI:
    """A threaded chat-completions server on ``127.0.0.1``; use it as a context manager."""

    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        structured: bool = True,
        met: Callable[[Seen], bool] = default_met,
        answer: Callable[[Seen], Reply | None] | None = None,
    ) -> None:
        self.latency_s = latency_s
        self.structured = structured
        self.met = met
        self.answer = answer
        self.faults: deque[Reply] = deque()
        self.requests: list[Seen] = []
        self.statuses: list[int] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.connections: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self._server = _Server((HOST, 0), _Handler)
        self._server.fake = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        """The base URL to give the client (``.../v1``)."""
        return f"http://{HOST}:{self._server.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def settings(self, **overrides: Any) -> ChalkSettings:
        """Worker settings pointing at this server: no verdict cache, quick retries."""
        return settings_for(self.url, **overrides)

    def fail_next(self, *replies: Reply) -> None:
        """Answer the next requests with these replies, one each, in order."""
        self.faults.extend(replies)

    @property
    def calls(self) -> int:
        """How many requests reached the server."""
        return len(self.requests)

    def _reply_for(self, seen: Seen) -> Reply:
        with self._lock:
            scripted = self.faults.popleft() if self.faults else None
        if scripted is None and self.answer is not None:
            scripted = self.answer(seen)
        reply = scripted or Reply()
        if reply.status == 200 and reply.body is None and reply.content is None:
            if seen.structured and not self.structured:
                return Reply(status=400, body=_error("response_format is not supported"))
            met = self.met(seen)
            verdict, reason = ("YES", "it is there") if met else ("NO", "it is not there")
            if seen.structured:
                reply.content = json.dumps({"reason": reason, "verdict": verdict})
            else:
                reply.content = f"{verdict}: {reason}"
        return reply

    def handle(self, handler: _Handler) -> None:
        """Answer one request (in the server's thread for its connection)."""
        length = int(handler.headers.get("content-length") or 0)
        raw = handler.rfile.read(length)
        body = json.loads(raw or b"{}")
        seen = Seen(
            body=body,
            started=time.monotonic(),
            connection=handler.client_address,
            raw=raw,
            path=handler.path,
            headers=dict(handler.headers.items()),
        )
        with self._lock:
            self.requests.append(seen)
            self.connections.add(handler.client_address)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            reply = self._reply_for(seen)
            delay = self.latency_s if reply.delay_s is None else reply.delay_s
            if delay:
                time.sleep(delay)
            if reply.body is not None:
                payload = reply.body
            elif reply.status >= 400:
                payload = _error(f"scripted HTTP {reply.status}")
            else:
                payload = _completion(body.get("model", "fake"), reply.content or "")
            with self._lock:
                self.statuses.append(reply.status)
            handler.send_response(reply.status)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(payload)))
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(payload)
        finally:
            with self._lock:
                self.in_flight -= 1


def _error(message: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "fake_error"}}).encode()


def _completion(model: str, content: str) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
        }
    ).encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # 64+ clients connecting at once must not wait on SYN retries
    fake: FakeOpenAI

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that gave up (a timeout test) closes its socket mid-reply


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so connection reuse can be measured
    disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms stalls
    server: _Server

    def do_POST(self) -> None:
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self.send_error(404)
            return
        self.server.fake.handle(self)

    def log_message(self, format: str, *args: object) -> None:
        pass
