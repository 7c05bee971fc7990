"""Queue entries: what kombu and Celery read of a message without checking it, checked.

kombu builds a message from whatever a queue's list holds, and Celery handles
the message. An entry that is not JSON, not kombu's message shape, or a task
message Celery cannot read (a ``task`` header that is not a name, no ``id``, a
body that is not ``[args, kwargs, embed]``) ended the whole worker. The
transport (``chalk_worker.broker.transport``) checks each entry here first and drops,
with a log line, what raises ``MalformedEntry``.
"""

from __future__ import annotations

import base64
import binascii

from kombu.compression import decompress

from chalk_client.cluster.messages import TASK_NAME
from chalk_worker.broker.fastjson import loads

SHOWN_CHARS = 300
"""How much of a dropped entry the log shows."""
JSON = "application/json"


class MalformedEntry(ValueError):
    """Raised when a queue entry is not a message this worker can take, saying why."""

    def __init__(self, reason: str, entry: object) -> None:
        super().__init__(reason)
        self.reason = reason
        self.entry = entry


def shorten(value: object) -> str:
    """``repr(value)`` cut to ``SHOWN_CHARS`` characters, saying how long it was."""
    text = repr(value)
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}... ({len(text)} characters)"


def _decoded_body(payload: dict[str, object], properties: dict[str, object]) -> bytes:
    """The entry's body as bytes, checked as kombu decodes it (``MalformedEntry`` if not)."""
    body = payload.get("body")
    if not isinstance(body, str):
        raise MalformedEntry("its body is not a string", payload)
    encoding = properties.get("body_encoding")
    if encoding is None or (isinstance(encoding, str) and encoding.lower() == "utf-8"):
        return body.encode("utf-8", "surrogatepass")
    if encoding != "base64":  # the only codec kombu has
        raise MalformedEntry(f"its body_encoding {shorten(encoding)} is not base64", payload)
    try:  # kombu decodes leniently: "!!!!" would become an empty body
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MalformedEntry(f"its body is not valid base64 ({exc})", payload) from None


def check_envelope(payload: object) -> tuple[dict[str, object], bytes]:
    """Check the kombu message shape of an entry; returns it and its decoded body.

    kombu reads ``properties`` (its ``delivery_tag``, and the ``exchange`` and
    ``routing_key`` of ``delivery_info``), ``headers`` as a mapping and decodes
    ``body`` by ``body_encoding``, none of it guarded.
    """
    if not isinstance(payload, dict):
        raise MalformedEntry(f"it is a JSON {type(payload).__name__}, not an object", payload)
    properties = payload.get("properties")
    if not isinstance(properties, dict):
        raise MalformedEntry("it has no 'properties' object", payload)
    tag = properties.get("delivery_tag")
    if not isinstance(tag, str) or not tag:
        raise MalformedEntry("it has no delivery_tag string", payload)
    info = properties.get("delivery_info")
    if not (
        isinstance(info, dict)
        and isinstance(info.get("exchange"), str)
        and isinstance(info.get("routing_key"), str)
    ):
        raise MalformedEntry("its delivery_info has no exchange and routing_key", payload)
    headers = payload.get("headers")
    if headers is not None and not isinstance(headers, dict):
        raise MalformedEntry("its headers are not an object", payload)
    for field in ("content-type", "content-encoding"):
        if not isinstance(payload.get(field), str | None):
            raise MalformedEntry(f"its {field} is not a string", payload)
    return payload, _decoded_body(payload, properties)


def _headers(payload: dict[str, object]) -> dict[str, object]:
    """An entry's headers (``check_envelope`` let through an object or none)."""
    headers = payload.get("headers")
    return headers if isinstance(headers, dict) else {}


def check_task(payload: dict[str, object], body: bytes) -> None:
    """Check what Celery reads unguarded from a task message (``MalformedEntry`` if wrong).

    A message with a ``task`` header is a task message of Celery's protocol 2:
    Celery needs the task name and ``id`` as strings, and a JSON body that is
    ``[args, kwargs, embed]``. Without the header Celery reads the body as
    protocol 1 (a task named in the body); Chalk never sends that, and Celery
    fails on many of its shapes, so a body naming a task is refused. A body that
    is not valid JSON (or does not decompress) is left to Celery, which logs and
    drops it.
    """
    headers = _headers(payload)
    is_json = payload.get("content-type") == JSON
    if "task" not in headers:
        if is_json and b'"task"' in body:  # cheap test first: events and replies never match
            decoded = _json(body, headers)
            if isinstance(decoded, dict) and "task" in decoded:
                raise MalformedEntry("it is a task message of Celery's protocol 1", payload)
        return
    if not isinstance(headers["task"], str):
        raise MalformedEntry("its 'task' header is not a task name", payload)
    if not isinstance(headers.get("id"), str) or not headers["id"]:
        raise MalformedEntry("its 'id' header is not a task id", payload)
    timelimit = headers.get("timelimit")
    if timelimit and not (
        isinstance(timelimit, list)
        and len(timelimit) == 2
        and all(limit is None or isinstance(limit, int | float) for limit in timelimit)
    ):
        raise MalformedEntry("its 'timelimit' header is not [hard, soft]", payload)
    stamped = headers.get("stamped_headers")
    if stamped and not (
        isinstance(stamped, list)
        and all(isinstance(name, str) for name in stamped)
        and isinstance(headers.get("stamps") or {}, dict)
    ):
        raise MalformedEntry("its 'stamped_headers' are not names of its 'stamps'", payload)
    if payload.get("content-type") != JSON:
        # Celery refuses content it does not accept, but passes "application/data"
        # and "application/text" through undecoded, and fails on them.
        raise MalformedEntry(f"its content-type is not {JSON}", payload)
    if not body:
        raise MalformedEntry("its body is empty", payload)
    decoded = _json(body, headers)
    if decoded is _NOT_JSON:
        return
    if not (
        isinstance(decoded, list)
        and len(decoded) == 3
        and isinstance(decoded[0], list)
        and isinstance(decoded[1], dict)
        and (decoded[2] is None or isinstance(decoded[2], dict))
    ):
        raise MalformedEntry("its body is not [args, kwargs, embed]", payload)


_NOT_JSON = object()


def _json(body: bytes, headers: dict[str, object]) -> object:
    """``body`` decoded as Celery decodes it, or ``_NOT_JSON`` (Celery reports those)."""
    try:
        if "compression" in headers:
            body = decompress(body, headers["compression"])
        return loads(body)
    except Exception:  # kombu's decoders raise many kinds; Celery turns each into DecodeError
        return _NOT_JSON


def job_of(payload: dict[str, object], body: bytes) -> tuple[str, str] | None:
    """The job id and task id of a ``chalk.score`` message (checked by ``check_task``)."""
    headers = _headers(payload)
    if headers.get("task") != TASK_NAME or "compression" in headers:
        return None
    decoded = _json(body, headers)
    if isinstance(decoded, list) and decoded and isinstance(decoded[0], list):
        args = decoded[0]
        if len(args) == 1 and isinstance(args[0], str):
            return args[0], str(headers["id"])
    return None


def why_dropped(exc: Exception) -> str:
    """Why an entry was dropped, and the entry (shortened), in one line."""
    if isinstance(exc, MalformedEntry):
        entry = exc.entry
        if isinstance(entry, dict) and "body" in entry:  # headers first: they name the task
            entry = {**{k: v for k, v in entry.items() if k != "body"}, "body": entry["body"]}
        return f"{exc.reason}: {shorten(entry)}"
    doc = getattr(exc, "doc", None)  # a JSONDecodeError's text
    if isinstance(doc, str):
        return f"it is not JSON ({exc}): {shorten(doc)}"
    return f"it cannot be decoded ({shorten(exc)})"
