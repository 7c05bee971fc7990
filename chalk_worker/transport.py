"""kombu's Redis transport, made robust to stray queue entries and cheaper per message.

- kombu ends the whole worker ("Unrecoverable error") on a list item that is not
  JSON: one stray ``LPUSH`` to the queue would stop every worker that pops it.
  This transport logs the entry and goes on.
- kombu builds a new ``redis.Redis`` for every ack and every event it publishes
  (the client object, not a connection: those come from the pool). Building one
  costs more than the command it sends: in a profile of a worker scoring trivial
  jobs, a fifth of the worker's time. This transport builds one per channel and
  connection pool and reuses it; ``redis.Redis`` is safe to share between threads.

Only ``chalk_worker.app`` uses it, for a Redis broker.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis as kombu_redis

log = logging.getLogger(__name__)


class Channel(kombu_redis.Channel):  # type: ignore[misc]
    """A Redis channel that survives entries that are not kombu messages."""

    _sync_client: tuple[Any, Any] | None = None
    """The pool the reused client was made for, and the client."""

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:  # kombu caches the one it makes (``client``, ``subclient``)
            return super()._create_client(asynchronous=True)
        made = self._sync_client
        pool = self.pool  # a new pool after kombu resets the connections: a new client
        if made is None or made[0] is not pool:
            made = self._sync_client = (pool, super()._create_client())
        return made[1]

    def _brpop_read(self, **options: Any) -> bool:
        try:
            return bool(super()._brpop_read(**options))
        except ValueError as exc:  # not JSON, not UTF-8, not a message
            log.error("dropped an entry of the queue that is not a task message: %s", exc)
            return False


class Transport(kombu_redis.Transport):  # type: ignore[misc]
    """kombu's Redis transport with ``Channel`` above."""

    Channel = Channel
