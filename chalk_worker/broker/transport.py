"""kombu's Redis transport, made robust to stray queue entries and cheaper per message.

- kombu builds a message from whatever a queue's list holds, and Celery handles
  the message; an entry neither can read ended the whole worker ("Unrecoverable
  error"), or read as a lost connection that redelivered every message the
  worker held. ``Message`` checks each entry first (``chalk_worker.broker.entries``)
  and the channel logs and drops one that is not a message. What Celery does
  handle (an unknown task, a body that is not valid JSON or does not decompress,
  a bad ``eta``) is left to Celery, which logs and drops it too. Errors of Redis,
  and errors raised once an entry is a message (in Celery's handling of it), are
  not dropped with the entry.
- Redis refuses writes while it is out of memory (``maxmemory``, ``noeviction``)
  or a read-only replica: noting a taken message, or kombu's record of one on
  other queues, is retried until Redis takes it, saying so in the log, and the
  worker takes nothing else meanwhile. Acknowledgements are sent without
  ``MULTI``: Redis refuses every command of a transaction while out of memory,
  even those of an ack, which free memory. (``chalk_worker.broker.qos``.)
- kombu builds a new ``redis.Redis`` for every ack and every event it publishes
  (the client object, not a connection: those come from the pool). Building one
  costs more than the command it sends: in a profile of a worker scoring trivial
  jobs, a fifth of the worker's time. This transport builds one per channel and
  connection pool and reuses it; ``redis.Redis`` is safe to share between threads.
- No message is ever only in a worker's memory. kombu takes a message with
  ``BRPOP`` and records it as unacknowledged in a later round trip: a worker (or
  Redis) dying in between lost it for good, and one dying after left it to the
  visibility timeout (12 h). A channel consuming the Chalk queue
  (``chalk_queue``) takes each message into a held list of its own instead,
  registered with a liveness deadline; acknowledging removes it from the list,
  and a dead consumer's list is given back by the other workers
  (``chalk_worker.cluster.delivery``). A closing channel gives its list back at once.
- Priorities and fair share. The messages wait in lanes, by priority and batch
  (``chalk_client.cluster.lanes``); the channel takes the next ones with the
  ``TAKE`` script, which moves them into the held list: as many at once as
  Celery's prefetch has room for (one round trip for many jobs, far from Redis).
  When nothing waits, it blocks on the queue's list of tokens (``BLMOVE`` into
  the held list, as before: a message pushed straight into the queue is taken
  so) and, woken or timed out, takes again.
- Celery closes a channel when its connection is lost and then acknowledges or
  gives back messages through it; kombu then built a new connection pool from a
  connection Celery had already dropped and failed (``AttributeError`` on
  ``hostname``), which ended the worker. Held messages go through a Redis client
  of their own, and the channel keeps the connection settings it was made with.

- In a worker, fanout messages (Celery's events) and acknowledgements are sent
  from threads of their own, many per round trip (``chalk_worker.broker.background``):
  far from Redis, four round trips per job on the thread that takes messages held
  every job up.

Only ``chalk_worker.app`` uses it, for a Redis broker. It is Celery's transport,
so it asks Celery's worker state whether a shutdown was requested.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from queue import Empty
from typing import Any

import redis
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from redis.exceptions import NoScriptError, OutOfMemoryError, ReadOnlyError

from chalk_client.cluster import keys
from chalk_client.cluster.lanes import MAX_TAKE, TAKE, TOKEN, take_args
from chalk_client.cluster.messages import HeldEntry
from chalk_worker.broker import background
from chalk_worker.broker.entries import check_envelope, check_task, job_of, why_dropped
from chalk_worker.broker.fastjson import dumps, loads
from chalk_worker.broker.qos import RETRY_MAX_S, QoS
from chalk_worker.cluster import delivery
from chalk_worker.cluster.delivery import HeldMessages
from chalk_worker.cluster.leases import describe_trouble

log = logging.getLogger(__name__)

TAKE_AHEAD_MARGIN = 2.0
TAKE_AHEAD_MAX = 2
"""Most take-ahead, as a multiple of the prefetch count."""
"""Take-ahead as a multiple of the jobs finished per ``TAKE`` round trip."""

HELD_TIMEOUT_S = 10.0
"""Longest wait for Redis when acknowledging or giving back held messages."""


class Message(virtual.Message):  # type: ignore[misc]
    """A kombu message, made only from an entry kombu and Celery can read."""

    chalk_job: tuple[str, str] | None = None
    """The job id and task id, for a ``chalk.score`` message."""

    def __init__(self, payload: object, channel: object = None, **kwargs: object) -> None:
        payload, body = check_envelope(payload)
        check_task(payload, body)
        super().__init__(payload, channel=channel, **kwargs)
        self.chalk_job = job_of(payload, body)
        if isinstance(channel, Channel):
            channel.took_entry = True


_held_clients: dict[str, redis.Redis] = {}
_held_clients_lock = threading.Lock()


def _held_client(params: dict[str, Any]) -> redis.Redis:
    """This process's client for held messages, per broker (made from kombu's settings)."""
    made = {**params, "socket_timeout": params.get("socket_timeout") or HELD_TIMEOUT_S}
    made.setdefault("socket_connect_timeout", HELD_TIMEOUT_S)
    key = repr(sorted((k, repr(v)) for k, v in made.items()))
    with _held_clients_lock:
        client = _held_clients.get(key)
        if client is None:
            client = _held_clients[key] = redis.Redis(connection_pool=redis.ConnectionPool(**made))
        return client


def _forget_held_clients() -> None:
    global _held_clients_lock
    _held_clients.clear()
    _held_clients_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_held_clients)


class Channel(kombu_redis.Channel):  # type: ignore[misc]
    """A Redis channel that holds what it takes in Redis and survives stray entries."""

    Message = Message
    QoS = QoS

    chalk_queue: str | None = None
    """The Chalk queue (transport option): a channel consuming it alone uses a held list."""
    chalk_lease_ms = 20_000
    """How long a consumer lives without renewal (transport option, ``CHALK_LEASE_S``)."""
    from_transport_options = (
        *kombu_redis.Channel.from_transport_options,
        "chalk_queue",
        "chalk_lease_ms",
    )

    _sync_client: tuple[redis.ConnectionPool, redis.Redis] | None = None
    """The pool the reused client was made for, and the client."""
    took_entry = False
    """Whether the entry being read became a ``Message``: errors after that are not its own."""
    consumer: str | None = None
    """This channel's consumer id, once it takes messages into a held list."""
    taken_raw: bytes | None = None
    """The held entry being delivered (for ``QoS.append``)."""
    _sent: str | None = None
    """The command in flight: ``TAKE`` (the script), ``BLMOVE`` or ``BRPOP``."""
    _wait_next = False
    """Whether the last ``TAKE`` found nothing: block on the queue's tokens next."""
    _woken = False
    """Whether the last ``BLMOVE`` moved a token into the held list (``TAKE`` drops it)."""
    _take_by_text = False
    """Whether Redis forgot the ``TAKE`` script: send its text (``EVAL``) once."""
    _paused_until = 0.0
    _pause_s = 0.0
    _params: dict[str, Any] | None = None
    """kombu's keyword arguments of a Redis pool (open-ended: TLS options, URL query...)."""
    _held: HeldMessages | None = None
    _round_trip = 0.0
    """A smoothed ``TAKE`` round trip, in seconds."""

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        # Kept from the first call: Celery drops the connection before it is done with
        # the channel (acks after a lost connection), and kombu reads it to make a pool.
        if asynchronous:
            made: dict[str, Any] = super()._connparams(asynchronous=True)
            return made
        if self._params is None:
            if self.connection is None or self.connection.client is None:
                raise redis.ConnectionError("the broker connection of this channel is closed")
            self._params = super()._connparams()
        return dict(self._params)

    @property
    def broker_url(self) -> str:
        """The broker, for the log (without the password)."""
        params = self._connparams()
        return f"redis://{params.get('host', '?')}:{params.get('port', '?')}/{params.get('db', 0)}"

    def held_messages(self) -> HeldMessages:
        """The Redis side of this channel's held messages."""
        if self._held is None:
            self._held = HeldMessages(self._held_redis(), lease_ms=self.chalk_lease_ms)
        return self._held

    def _held_redis(self) -> redis.Redis:
        """The client held messages go through (the broker's, with a pool of its own)."""
        params = self._connparams()
        params["connection_class"] = params.get("connection_class") or redis.Connection
        return _held_client(params)

    def _reliable(self) -> bool:
        """Whether this channel consumes the Chalk queue alone (and so holds what it takes)."""
        return self.chalk_queue is not None and self.active_queues == [self.chalk_queue]

    def _brpop_start(self, timeout: float | None = None) -> None:
        if not self._reliable():
            self._sent = "BRPOP"
            super()._brpop_start(timeout)
            return
        if time.monotonic() < self._paused_until or not self._registered_consumer():
            return
        assert self.chalk_queue is not None and self.consumer is not None
        if timeout is None:
            timeout = self.brpop_timeout
        self._in_poll = self.client.connection
        self._brpop_sent_at = time.monotonic()
        if self._wait_next:
            self._sent = "BLMOVE"
            self.client.connection.send_command(
                "BLMOVE", self.chalk_queue, keys.held(self.consumer), "RIGHT", "LEFT", timeout or 0
            )
            return
        self._sent = "TAKE"
        args = take_args(self.chalk_queue, self.consumer, woken=self._woken, count=self._room())
        if self._take_by_text:
            self.client.connection.send_command("EVAL", TAKE.text, *args)
        else:
            self.client.connection.send_command("EVALSHA", TAKE.sha, *args)

    def _registered_consumer(self) -> bool:
        """Register this channel's consumer before its first take (``False``: not yet)."""
        if self.consumer is not None:
            return True
        assert self.chalk_queue is not None
        consumer = delivery.REGISTRY.new(self.chalk_queue)
        try:
            self.held_messages().register([consumer])
        except (OutOfMemoryError, ReadOnlyError) as exc:
            delivery.REGISTRY.close(consumer, given_back=True)
            self._pause(exc, "registering this worker as a consumer of the queue")
            return False
        except BaseException:
            delivery.REGISTRY.close(consumer, given_back=True)
            raise
        self.consumer = consumer
        return True

    def _pause(self, exc: Exception, doing: str) -> None:
        """Take nothing for a while: Redis refuses writes (out of memory, read-only)."""
        self._pause_s = min(max(self._pause_s * 2, 1.0), RETRY_MAX_S)
        log.warning(
            "%s; this worker takes no message until then, retrying in %.0f s",
            describe_trouble(exc, self.broker_url, doing),
            self._pause_s,
        )
        self._paused_until = time.monotonic() + self._pause_s

    def _create_client(self, asynchronous: bool = False) -> redis.Redis:
        if asynchronous:  # kombu caches the one it makes (``client``, ``subclient``)
            client: redis.Redis = super()._create_client(asynchronous=True)
            return client
        made = self._sync_client
        pool = self.pool  # a new pool after kombu resets the connections: a new client
        if made is None or made[0] is not pool:
            made = self._sync_client = (pool, super()._create_client())
        return made[1]

    @property
    def _redis_errors(self) -> tuple[type[BaseException], ...]:
        """What kombu counts as a lost connection or a broker's refusal."""
        return tuple(self.connection.connection_errors) + tuple(self.connection.channel_errors)

    def _room(self) -> int:
        """How many messages to take at once: as many as Celery's prefetch has room for."""
        room = self.qos.can_consume_max_estimate()
        return MAX_TAKE if room is None else max(1, min(int(room), MAX_TAKE))

    def _took(self, round_trip: float) -> None:
        """Size the take-ahead after a ``TAKE`` that took ``round_trip`` seconds.

        Far from Redis, slots free up while a ``TAKE`` is on its way: taking as many
        more as the worker finishes in a round trip (the link's bandwidth-delay
        product, in jobs) keeps them busy. Near Redis, or with long jobs, that is none.
        """
        self._round_trip = (
            round_trip if not self._round_trip else (0.8 * self._round_trip + 0.2 * round_trip)
        )
        prefetch = self.qos.prefetch_count or 0
        ahead = math.ceil(self.qos.acked.per_second() * self._round_trip * TAKE_AHEAD_MARGIN)
        self.qos.take_ahead = min(ahead, TAKE_AHEAD_MAX * prefetch)

    def _brpop_read(self, **options: object) -> bool:
        if self._sent in ("BLMOVE", "TAKE"):
            return self._held_read(**options)
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
            log.error(
                "dropped an entry of the queue that is not a task message: %s", why_dropped(exc)
            )
            return False
        finally:
            self.took_entry = False

    def _held_read(self, **options: object) -> bool:
        """Read the reply of ``TAKE`` or ``BLMOVE``; deliver the messages it moved to the
        held list, or say what to send next (``Empty``: nothing to deliver yet)."""
        sent = self._sent
        try:
            try:
                reply = self.client.parse_response(
                    self.client.connection, "EVALSHA" if sent == "TAKE" else sent, **options
                )
            except self.connection_errors:
                self.client.connection.disconnect()
                raise
            except (OutOfMemoryError, ReadOnlyError) as exc:
                self._pause(exc, "taking a message from the queue")
                raise Empty() from None
            except NoScriptError:
                self._take_by_text = True  # Redis restarted or flushed its scripts
                raise Empty() from None
            self._pause_s = 0.0
            if sent == "TAKE":
                items = [item for item in reply or [] if item is not None]
                self._take_by_text = self._woken = False
                self._wait_next = not items
            else:  # BLMOVE: woken by a token (or a plain message), or timed out
                self._wait_next = False
                self._woken = reply is not None and reply in (TOKEN, TOKEN.encode())
                items = [] if reply is None or self._woken else [reply]
            if sent == "TAKE":
                self._took(time.monotonic() - self._brpop_sent_at)
            if not items:
                raise Empty()
        finally:
            self._in_poll = None
            self._sent = None
            self._flush_brpop_reauth()
        assert self.chalk_queue is not None
        self._queue_cycle.rotate(self.chalk_queue)
        raws = [item if isinstance(item, bytes) else str(item).encode() for item in items]
        return self._deliver_taken(raws)

    def _deliver_taken(self, raws: list[bytes]) -> bool:
        """Deliver messages taken into the held list, in order; whether any was delivered.

        Should delivering one raise, those after it are given back to the queue (they
        would wait in the held list, undelivered, until this channel closes).
        """
        delivered = False
        for index, raw in enumerate(raws):
            try:
                delivered = self._deliver_one(raw) or delivered
            except BaseException:
                self._give_back_entries(raws[index + 1 :])
                raise
        return delivered

    def _deliver_one(self, raw: bytes) -> bool:
        """Deliver one held message; one that is not a message is logged and dropped."""
        self.took_entry = False
        self.taken_raw = raw
        try:
            assert self.chalk_queue is not None
            self.connection._deliver(loads(raw.decode()), self.chalk_queue)
            return True
        except Exception as exc:
            # Redis's errors, and any error once the entry is a message (Celery's
            # handling of it, recording it), are not the entry's fault.
            if self.took_entry or isinstance(exc, self._redis_errors):
                raise
            log.error(
                "dropped an entry of the queue that is not a task message: %s", why_dropped(exc)
            )
            if self.consumer is not None:
                self.held_messages().ack(self.consumer, raw)
            return False
        finally:
            self.took_entry = False
            self.taken_raw = None

    def _give_back_entries(self, raws: list[bytes]) -> None:
        """Give back held messages this channel took and will not deliver."""
        if not raws or self.consumer is None:
            return
        try:
            self.held_messages().give_back(
                self.consumer, [HeldEntry.parse(raw) for raw in raws], fresh=False
            )
        except redis.RedisError as exc:  # given back when this channel closes
            log.warning("could not give back %d message(s) not delivered: %s", len(raws), exc)

    def close(self) -> None:
        """Close the channel, then give back every message it still holds."""
        consumer = self.consumer
        if consumer is not None:  # acknowledged messages leave the list before the rest go back
            background.ACKS.flush(timeout=HELD_TIMEOUT_S)
        try:
            super().close()
        finally:
            if consumer is not None:
                self._give_back(consumer)

    def _give_back(self, consumer: str) -> None:
        """Give back what this closed channel holds (later, by the keeper, if Redis fails)."""
        try:
            self.held_messages().give_back_all(consumer, fresh=False)
        except redis.RedisError as exc:
            log.warning(
                "could not give back the messages this worker took and did not start (%s); "
                "retrying while it runs (or another worker does it once it is gone)",
                exc,
            )
            delivery.REGISTRY.close(consumer, given_back=False)
            return
        delivery.REGISTRY.close(consumer, given_back=True)

    def _put_fanout(self, exchange: str, message: object, routing_key: str, **kwargs: Any) -> None:
        # In a worker, events go out from a thread of their own (chalk_worker.broker.fanout).
        if kwargs.get("_publish_batch") is not None or not background.EVENTS.enabled:
            super()._put_fanout(exchange, message, routing_key, **kwargs)
            return
        client, payload = self._create_client(), dumps(message)
        for topic in self._get_publish_topics(exchange, routing_key):
            background.EVENTS.send(background.Command(client, ("PUBLISH", topic, payload)))

    def _deliver_fanout_message(self, message: object, exchange: str) -> bool:
        # Broadcasts (remote control) come by PUBLISH, past _brpop_read: one malformed
        # PUBLISH to the pidbox channel would otherwise stop every worker at once.
        self.took_entry = False
        try:
            return bool(super()._deliver_fanout_message(message, exchange))
        except Exception as exc:
            if self.took_entry or isinstance(exc, self._redis_errors):
                raise
            log.error(
                "dropped a broadcast on %s that is not a message: %s", exchange, why_dropped(exc)
            )
            return False
        finally:
            self.took_entry = False


class Transport(kombu_redis.Transport):  # type: ignore[misc]
    """kombu's Redis transport with ``Channel`` above."""

    Channel = Channel
