"""Batch callbacks: the URL a batch is called back at, the body it gets, its signature.

When a batch submitted with ``callback_url`` has a result for every job, a worker
sends one ``POST`` to that URL::

    {"batch_id": "b-...", "delivery_id": "...", "event": "batch.finished",
     "finished_at": 1767225600.0, "summary": {"total": 100, "counts": {...}, ...}}

with the headers ``Content-Type: application/json``, ``X-Chalk-Signature:
sha256=HEX`` (the HMAC-SHA256 of the exact body bytes with the workers'
``CHALK_CALLBACK_SECRET``), ``X-Chalk-Delivery`` (the delivery id) and
``X-Chalk-Batch`` (the batch id, percent-encoded if it is not printable ASCII).
The delivery id is made once per batch's callback and sent again with every
retry: a receiver that has seen it already answers 2xx and does nothing.
``verify_signature`` is what a receiver checks.

The workers keep the callback in Redis (``chalk_client.cluster.callbacks``) and
send it (``chalk_worker.cluster.callbacks``) only to addresses the operator
allowed (``chalk_client.callback_allowlist``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit

from chalk_client.errors import InvalidCallbackError

if TYPE_CHECKING:
    from chalk_client.summary import BatchSummary

SIGNATURE_HEADER = "X-Chalk-Signature"
"""The header carrying ``sha256=`` and the body's HMAC-SHA256 in hex."""
DELIVERY_HEADER = "X-Chalk-Delivery"
"""The header carrying the delivery id (the same on every retry of one callback)."""
BATCH_HEADER = "X-Chalk-Batch"
"""The header carrying the batch id."""
EVENT = "batch.finished"
"""The body's ``event``: every job of the batch has a result."""
SCHEMES = ("http", "https")
"""The schemes a callback URL may have."""
MAX_URL_LENGTH = 2048
"""The longest callback URL taken."""


def check_callback_url(url: str) -> str:
    """``url`` if it is a URL a worker can ``POST`` to; else ``InvalidCallbackError``.

    Only the form is checked here (``http``/``https``, a host, a port in range, no
    user name or password, no spaces); which hosts the workers may reach is the
    operator's allowlist (``CHALK_CALLBACK_ALLOW``), checked by the workers and
    by ``chalk serve``.
    """
    if not isinstance(url, str) or not url:
        raise InvalidCallbackError("callback_url must be a non-empty string (an http(s) URL)")
    if len(url) > MAX_URL_LENGTH:
        raise InvalidCallbackError(
            f"callback_url is {len(url)} characters long; at most {MAX_URL_LENGTH} are taken"
        )
    if any(char.isspace() or ord(char) < 32 or ord(char) == 127 for char in url):
        raise InvalidCallbackError(
            f"callback_url {url!r} holds spaces or control characters: percent-encode them"
        )
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidCallbackError(f"callback_url {url!r} is not a URL: {exc}") from None
    if parts.scheme.lower() not in SCHEMES:
        raise InvalidCallbackError(
            f"callback_url {url!r} must start with http:// or https:// (workers send a POST)"
        )
    if not parts.hostname:
        raise InvalidCallbackError(
            f"callback_url {url!r} names no host, e.g. https://hooks.example.org/chalk"
        )
    if parts.username is not None or parts.password is not None:
        raise InvalidCallbackError(
            f"callback_url {redact_url(url)!r} carries a user name or password: leave them out "
            "and check the X-Chalk-Signature header instead (or put a token in the query)"
        )
    if port == 0:
        raise InvalidCallbackError(f"callback_url {url!r} names port 0")
    return url


def redact_url(url: str) -> str:
    """``url`` without a user name, password or query (which may hold a token), for logs."""
    head, mark, _ = url.partition("?")
    scheme, slashes, rest = head.partition("://")
    if slashes:
        where, slash, path = rest.partition("/")
        head = f"{scheme}://{where.rpartition('@')[2]}{slash}{path}"
    return head + ("?..." if mark else "")


def sign(body: bytes, secret: str | bytes) -> str:
    """The ``X-Chalk-Signature`` value of ``body``: ``sha256=`` and its HMAC-SHA256 in hex."""
    key = secret.encode() if isinstance(secret, str) else secret
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def verify_signature(body: bytes, signature: str | None, secret: str | bytes) -> bool:
    """Whether ``signature`` (the ``X-Chalk-Signature`` header) signs ``body`` with ``secret``.

    ``body`` must be the request's bytes as received, before any JSON parsing.
    The comparison takes the same time whatever the signature.
    """
    if not signature:
        return False
    return hmac.compare_digest(sign(body, secret), signature.strip())


def callback_body(
    delivery_id: str, batch_id: str, summary: BatchSummary, finished_at: float
) -> bytes:
    """The body of a batch's callback: compact JSON, keys sorted, UTF-8."""
    document = {
        "batch_id": batch_id,
        "delivery_id": delivery_id,
        "event": EVENT,
        "finished_at": finished_at,
        "summary": summary.as_json(),
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return text.encode()


def header_text(text: str) -> str:
    """``text`` as a header value: as it is if printable ASCII, else percent-encoded."""
    return text if text.isascii() and text.isprintable() else quote(text)


def callback_headers(
    body: bytes, delivery_id: str, batch_id: str, secret: str | bytes
) -> dict[str, str]:
    """The headers sent with ``body``: its type, its signature, the delivery and batch ids."""
    return {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: sign(body, secret),
        DELIVERY_HEADER: delivery_id,
        BATCH_HEADER: header_text(batch_id),
    }
