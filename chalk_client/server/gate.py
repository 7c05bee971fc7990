"""What every request passes before a route sees it: its key, its size, its turn.

``Gate`` is plain ASGI middleware (cheaper per request than a framework's):

- **keys**: with ``CHALK_API_KEYS`` set, every request but ``GET /health``
  carries one, as ``Authorization: Bearer KEY`` or ``X-Auth-Token: KEY``
  (Judge0's header); a missing or wrong key is a 401. The key is compared with
  every configured key in constant time, and is never logged or echoed.
- **size**: a body longer than ``CHALK_SERVER_MAX_BODY_MB`` is a 413, whether
  its ``Content-Length`` says so or it streams past the limit.
- **turn**: one key (or one address, without keys) has at most
  ``CHALK_SERVER_MAX_IN_FLIGHT`` requests in flight; one more is a 429.

Every refusal is JSON: ``{"error": "...", "detail": "what to do"}``.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from starlette.exceptions import HTTPException

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

OPEN_PATHS = frozenset({"/health"})
"""Paths served without a key."""


async def send_error(
    send: Send, status: int, error: str, detail: str, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """Answer ``status`` with the JSON body every refusal has."""
    body = json.dumps({"error": error, "detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyTooLarge(HTTPException):
    """A request's body went past the limit while it was read (an ``HTTPException``, so
    the framework's body parsing lets it through to the 413 it is)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            413,
            f"request body too large: the limit is {limit} bytes (CHALK_SERVER_MAX_BODY_MB); "
            "send fewer jobs per request",
        )


def _loopback_host(scope: Scope) -> bool:
    """Whether the request's ``Host`` names loopback: a web page's script, its name made
    to point at 127.0.0.1 (DNS rebinding), still sends its own name."""
    host = b""
    for name, value in scope.get("headers", ()):
        if name == b"host":
            host = value
    text = host.decode("latin-1").strip().lower()
    if text.startswith("["):
        text = text[1:].split("]", 1)[0]
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]
    if text in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


def _digest(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()


class Gate:
    """Keys, body size and requests in flight, checked before ``app`` sees a request."""

    def __init__(
        self, app: ASGIApp, *, keys: list[str], max_body_bytes: int, max_in_flight: int
    ) -> None:
        self.app = app
        # Compared as digests: equal lengths, so compare_digest's time says nothing of a key.
        self.keys = [_digest(key.encode()) for key in keys]
        self.max_body_bytes = max_body_bytes
        self.max_in_flight = max_in_flight
        self.in_flight: Counter[bytes] = Counter()

    def _caller(self, scope: Scope) -> bytes | None:
        """Who the request counts against: its key's digest, or its address without keys;
        ``None``: a key is needed and this request has no right one."""
        if not self.keys:
            client = scope.get("client")
            return str(client[0] if client else "").encode()
        offered = b""
        for name, value in scope.get("headers", ()):
            if name == b"authorization" and value[:7].lower() == b"bearer ":
                offered = value[7:].strip()
            elif name == b"x-auth-token" and not offered:
                offered = value.strip()
        digest = _digest(offered)
        matched = False
        for key in self.keys:  # every key, always: the time taken says nothing
            matched |= hmac.compare_digest(digest, key)
        return digest if offered and matched else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] in OPEN_PATHS and scope["method"] in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        if not self.keys and not _loopback_host(scope):
            await send_error(
                send,
                421,
                "not a loopback host",
                "a server without keys answers requests addressed to it on loopback only "
                "(Host: 127.0.0.1, localhost or [::1]); set CHALK_API_KEYS to serve others",
            )
            return
        caller = self._caller(scope)
        if caller is None:
            await send_error(
                send,
                401,
                "missing or wrong API key",
                "send one of the server's keys (CHALK_API_KEYS) as 'Authorization: Bearer "
                "KEY' or 'X-Auth-Token: KEY'",
                [(b"www-authenticate", b"Bearer")],
            )
            return
        length = self._declared_length(scope)
        if length is not None and length > self.max_body_bytes:
            await self._too_large(send)
            return
        if self.in_flight[caller] >= self.max_in_flight:
            await send_error(
                send,
                429,
                "too many requests in flight",
                f"this key has {self.max_in_flight} requests in flight "
                "(CHALK_SERVER_MAX_IN_FLIGHT); wait for one to finish, or send a batch",
                [(b"retry-after", b"1")],
            )
            return
        self.in_flight[caller] += 1
        started = False

        async def counted_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, self._limited(receive), counted_send)
        except BodyTooLarge:
            if not started:
                await self._too_large(send)
        finally:
            self.in_flight[caller] -= 1
            if self.in_flight[caller] <= 0:
                del self.in_flight[caller]

    def _declared_length(self, scope: Scope) -> int | None:
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    return int(value)
                except ValueError:
                    return None
        return None

    def _limited(self, receive: Receive) -> Receive:
        read = 0
        limit = self.max_body_bytes

        async def limited() -> Message:
            nonlocal read
            message = await receive()
            if message["type"] == "http.request":
                read += len(message.get("body", b""))
                if read > limit:
                    raise BodyTooLarge(limit)
            return message

        return limited

    async def _too_large(self, send: Send) -> None:
        await send_error(
            send,
            413,
            "request body too large",
            f"the limit is {self.max_body_bytes} bytes (CHALK_SERVER_MAX_BODY_MB); "
            "send fewer jobs per request",
        )
