"""kombu's Redis transport, made robust to stray queue entries and cheaper per message.

- kombu builds a message from whatever a queue's list holds, and Celery handles
  the message. An entry that is not JSON, not kombu's message shape, or a task
  message Celery cannot read (a ``task`` header that is not a name, no ``id``,
  a body that is not ``[args, kwargs, embed]``) ended the whole worker
  ("Unrecoverable error"), or read as a lost connection that redelivered every
  message the worker held. ``Message`` checks what kombu and Celery rely on
  without checking it themselves and raises ``MalformedEntry``; the channel logs
  such an entry and drops it. What Celery does handle (an unknown task, a body
  that is not valid JSON or does not decompress, a bad ``eta``) is left to Celery,
  which logs and drops it too. Errors of Redis, and errors raised once an entry
  is a message (in Celery's handling of it), are not dropped with the entry.
- Redis refuses writes while it is out of memory (``maxmemory``, ``noeviction``)
  or a read-only replica. A message kombu has popped from the queue exists only
  in this process until kombu records it as unacknowledged: ``QoS`` retries that
  record until Redis takes it, saying so in the log, rather than losing the
  message and the worker. Acknowledgements are sent without ``MULTI``: Redis
  refuses every command of a transaction while out of memory, even the ``ZREM``
  and ``HDEL`` of an ack, which free memory.
- kombu builds a new ``redis.Redis`` for every ack and every event it publishes
  (the client object, not a connection: those come from the pool). Building one
  costs more than the command it sends: in a profile of a worker scoring trivial
  jobs, a fifth of the worker's time. This transport builds one per channel and
  connection pool and reuses it; ``redis.Redis`` is safe to share between threads.

Only ``chalk_worker.app`` uses it, for a Redis broker. It is Celery's transport,
so it asks Celery's worker state whether a shutdown was requested.
"""

from __future__ import annotations

import base64
import binascii
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from queue import Empty
from typing import Any

from kombu.compression import decompress
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils.json import dumps, loads
from redis.exceptions import OutOfMemoryError, ReadOnlyError

from chalk_worker.leases import describe_trouble

log = logging.getLogger(__name__)

SHOWN_CHARS = 300
"""How much of a dropped entry the log shows."""
RETRY_MAX_S = 10.0
"""Longest wait between two attempts to record a taken message."""
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


def _decoded_body(payload: dict[str, Any], properties: dict[str, Any]) -> bytes:
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


def check_envelope(payload: object) -> bytes:
    """Check the kombu message shape of an entry; returns its decoded body.

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
    return _decoded_body(payload, properties)


def check_task(payload: dict[str, Any], body: bytes) -> None:
    """Check what Celery reads unguarded from a task message (``MalformedEntry`` if wrong).

    A message with a ``task`` header is a task message of Celery's protocol 2:
    Celery needs the task name and ``id`` as strings, and a JSON body that is
    ``[args, kwargs, embed]``. Without the header Celery reads the body as
    protocol 1 (a task named in the body); Chalk never sends that, and Celery
    fails on many of its shapes, so a body naming a task is refused. A body that
    is not valid JSON (or does not decompress) is left to Celery, which logs and
    drops it.
    """
    headers = payload.get("headers") or {}
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


def _json(body: bytes, headers: dict[str, Any]) -> Any:
    """``body`` decoded as Celery decodes it, or ``_NOT_JSON`` (Celery reports those)."""
    try:
        if "compression" in headers:
            body = decompress(body, headers["compression"])
        return loads(body)
    except Exception:  # kombu's decoders raise many kinds; Celery turns each into DecodeError
        return _NOT_JSON


class Message(virtual.Message):  # type: ignore[misc]
    """A kombu message, made only from an entry kombu and Celery can read."""

    def __init__(self, payload: Any, channel: Any = None, **kwargs: Any) -> None:
        check_task(payload, check_envelope(payload))
        super().__init__(payload, channel=channel, **kwargs)
        if isinstance(channel, Channel):
            channel.took_entry = True


def _broker_url(connection: Any) -> str:
    """The Redis URL of a kombu connection, for the log (without the password)."""
    scheme = "rediss" if connection.ssl else "redis"
    return f"{scheme}://{connection.hostname}:{connection.port}/{connection.virtual_host or 0}"


SHUTTING_DOWN = threading.Event()
"""Set by ``chalk_worker.app`` when Celery tells the worker to stop (warm or cold)."""


def shutdown_requested() -> bool:
    """Whether the worker was told to stop."""
    return SHUTTING_DOWN.is_set()


class QoS(kombu_redis.QoS):  # type: ignore[misc]
    """kombu's acknowledgement emulation, which waits out a Redis that refuses writes."""

    def append(self, message: Any, delivery_tag: str) -> None:
        """Record a taken message as unacknowledged; until then it is only in this process."""
        record = super().append
        delay = 1.0
        while True:
            try:
                record(message, delivery_tag)
                return
            except (OutOfMemoryError, ReadOnlyError) as exc:
                url = _broker_url(self.channel.connection.client)
                if shutdown_requested():
                    log.error(
                        "shutting down while %s: a message taken from the queue could not be "
                        "kept and is dropped; push it back with LPUSH %s once Redis takes "
                        "writes: %s",
                        describe_trouble(exc, url, "recording it"),
                        message.delivery_info.get("routing_key"),
                        dumps(message._raw),
                    )
                    raise
                log.warning(
                    "%s; this worker takes no other message until then, retrying in %.0f s",
                    describe_trouble(exc, url, "recording a message taken from the queue"),
                    delay,
                )
                deadline = time.monotonic() + delay
                while time.monotonic() < deadline and not shutdown_requested():
                    time.sleep(0.1)
                delay = min(delay * 2, RETRY_MAX_S)

    @contextmanager
    def pipe_or_acquire(self, pipe: Any = None, client: Any = None) -> Iterator[Any]:
        """kombu's pipeline for acks and records, without ``MULTI`` (see the module's doc)."""
        if pipe:
            yield pipe
            return
        with self.channel.conn_or_acquire(client) as acquired:
            yield acquired.pipeline(transaction=False)


class Channel(kombu_redis.Channel):  # type: ignore[misc]
    """A Redis channel that survives entries that are not task messages."""

    Message = Message
    QoS = QoS

    _sync_client: tuple[Any, Any] | None = None
    """The pool the reused client was made for, and the client."""
    took_entry = False
    """Whether the entry being read became a ``Message``: errors after that are not its own."""

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:  # kombu caches the one it makes (``client``, ``subclient``)
            return super()._create_client(asynchronous=True)
        made = self._sync_client
        pool = self.pool  # a new pool after kombu resets the connections: a new client
        if made is None or made[0] is not pool:
            made = self._sync_client = (pool, super()._create_client())
        return made[1]

    @property
    def _redis_errors(self) -> tuple[type[BaseException], ...]:
        """What kombu counts as a lost connection or a broker's refusal."""
        return tuple(self.connection.connection_errors) + tuple(self.connection.channel_errors)

    def _brpop_read(self, **options: Any) -> bool:
        self.took_entry = False
        try:
            return bool(super()._brpop_read(**options))
        except Empty:  # kombu's "no entry": the pop timed out
            raise
        except Exception as exc:
            # Redis's errors, and any error once the entry is a message (Celery's
            # handling of it, recording it), are not the entry's fault.
            if self.took_entry or isinstance(exc, self._redis_errors):
                raise
            log.error("dropped an entry of the queue that is not a task message: %s", _why(exc))
            return False
        finally:
            self.took_entry = False

    def _deliver_fanout_message(self, message: Any, exchange: str) -> bool:
        # Broadcasts (remote control) come by PUBLISH, past _brpop_read: one malformed
        # PUBLISH to the pidbox channel would otherwise stop every worker at once.
        self.took_entry = False
        try:
            return bool(super()._deliver_fanout_message(message, exchange))
        except Exception as exc:
            if self.took_entry or isinstance(exc, self._redis_errors):
                raise
            log.error("dropped a broadcast on %s that is not a message: %s", exchange, _why(exc))
            return False
        finally:
            self.took_entry = False


def _why(exc: Exception) -> str:
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


class Transport(kombu_redis.Transport):  # type: ignore[misc]
    """kombu's Redis transport with ``Channel`` above."""

    Channel = Channel
