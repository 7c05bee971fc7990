"""The Redis protocol that clients and workers share: keys, Lua scripts, builders, parsers.

Every key (``keys``), every script with the builders that queue it and the
parsers that read its reply (``submit``, ``watch``, ``leases``, ``finish``,
``delivery``, ``reconcile``, ``purge``, ``rate``, ``callbacks``), the queue's
message format (``messages``), the worker-presence record (``presence``), the
one way to run them (``script``: pipelines that reload forgotten scripts), and
the Redis users each part of the cluster needs (``acl``).
The client's store and the worker's leases, deliveries, reconciler, presence,
rate limiter and callback sender are thin I/O shells over it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chalk_client.cluster import keys
    from chalk_client.cluster.connection import connect, connect_async, redacted, shown_url
    from chalk_client.cluster.messages import TASK_NAME, QueueMessage, queue_message, task_queue
    from chalk_client.cluster.presence import WorkerPresence
    from chalk_client.cluster.script import (
        SCRIPTS,
        Pipeline,
        Script,
        run_pipeline,
        run_pipeline_async,
    )

# Each name from the module that defines it, on first use: importing one part of the
# protocol (``keys``, say) does not load redis-py and kombu.
_HOMES = {
    "keys": "",
    "connect": "connection",
    "connect_async": "connection",
    "redacted": "connection",
    "shown_url": "connection",
    "TASK_NAME": "messages",
    "QueueMessage": "messages",
    "queue_message": "messages",
    "task_queue": "messages",
    "WorkerPresence": "presence",
    "SCRIPTS": "script",
    "Pipeline": "script",
    "Script": "script",
    "run_pipeline": "script",
    "run_pipeline_async": "script",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not home:
        return importlib.import_module(f"{__name__}.{name}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


__all__ = [
    "SCRIPTS",
    "TASK_NAME",
    "Pipeline",
    "QueueMessage",
    "Script",
    "WorkerPresence",
    "connect",
    "connect_async",
    "keys",
    "queue_message",
    "redacted",
    "run_pipeline",
    "run_pipeline_async",
    "shown_url",
    "task_queue",
]
