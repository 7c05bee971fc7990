"""kombu's Redis transport, made to drop a queue entry that is not a message instead of dying.

kombu ends the whole worker ("Unrecoverable error") on a list item that is not
JSON: one stray ``LPUSH`` to the queue would stop every worker that pops it.
This transport logs the entry and goes on. Only ``chalk_worker.app`` uses it,
for a Redis broker.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis as kombu_redis

log = logging.getLogger(__name__)


class Channel(kombu_redis.Channel):  # type: ignore[misc]
    """A Redis channel that survives entries that are not kombu messages."""

    def _brpop_read(self, **options: Any) -> bool:
        try:
            return bool(super()._brpop_read(**options))
        except ValueError as exc:  # not JSON, not UTF-8, not a message
            log.error("dropped an entry of the queue that is not a task message: %s", exc)
            return False


class Transport(kombu_redis.Transport):  # type: ignore[misc]
    """kombu's Redis transport with ``Channel`` above."""

    Channel = Channel
