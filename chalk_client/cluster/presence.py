"""A worker's presence: the record each live worker keeps fresh under ``chalk:worker:NODE``.

Workers write it (``chalk_worker.cluster.presence``) when ready and refresh it every
half lease, with a TTL of two leases, so a dead worker drops out by itself;
``chalk health`` and the client read it.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis
import redis.asyncio
from pydantic import BaseModel, ValidationError

from chalk_client.cluster import keys
from chalk_client.cluster.script import as_text


class WorkerPresence(BaseModel):
    """What a live worker says of itself in ``chalk:worker:NODE``."""

    node: str
    """Celery's node name, ``name@host``."""
    host: str
    pid: int
    pool: str
    """Celery's pool: ``threads`` (the default), ``prefork``, ..."""
    concurrency: int
    """Jobs the worker holds at once."""
    queue: str
    started: float
    """When the worker started (Unix time, the worker's clock)."""
    seen: float
    """When it last refreshed this record (Unix time, the worker's clock)."""
    version: str
    """The chalk-queue version it runs."""
    sandbox: list[str]
    """Its sandbox layers, one line each, as ``detect_layers().report()`` words them."""
    metrics_port: int | None = None
    """Where it serves Prometheus metrics (``CHALK_METRICS_PORT``), if it does."""
    running: int | None = None
    """Jobs it is scoring now (known for the threads pool)."""
    llm_server: str | None = None
    """The OpenAI-compatible server its rubric judges ask (a password in it hidden)."""
    llm_model: str | None = None
    """The model of its rubric judges that name none (``CHALK_RUBRIC_MODEL``)."""
    llm_key: bool | None = None
    """Whether it has an API key for that server; the key itself is never published."""
    languages: dict[str, str] | None = None
    """Each language of the ``tests`` judge and its toolchain's version here, or
    ``missing: ...`` saying what is not installed (workers before 0.2 say nothing)."""


def parse_presences(raws: Sequence[bytes | str | None]) -> list[WorkerPresence]:
    """The presences among raw records (expired or unreadable records are left out)."""
    found = []
    for raw in raws:
        if raw is None:
            continue  # expired between the scan and the read
        try:
            found.append(WorkerPresence.model_validate_json(raw))
        except ValidationError:
            continue
    return found


def read_workers(client: redis.Redis) -> list[WorkerPresence]:
    """Every live worker's presence, by node name (records that do not parse are skipped)."""
    names = sorted(as_text(name) for name in client.scan_iter(keys.WORKER_PREFIX + "*", 500))
    if not names:
        return []
    return parse_presences(client.mget(names))


async def read_workers_async(client: redis.asyncio.Redis) -> list[WorkerPresence]:
    """``read_workers`` for an asyncio client."""
    names = sorted([as_text(n) async for n in client.scan_iter(keys.WORKER_PREFIX + "*", 500)])
    if not names:
        return []
    return parse_presences(await client.mget(names))
