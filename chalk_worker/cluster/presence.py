"""A worker's presence in Redis, for ``chalk health``; and its wait for Redis at start.

Before it consumes, a worker waits for the store's Redis and says so in its log
(``wait_for_redis``): a worker started before Redis, or while Redis restarts,
starts taking jobs once Redis answers. Once ready, it publishes a
``WorkerPresence`` under ``chalk:worker:NODE``: its pool, its sandbox layers
(``detect_layers().report()``), its metrics port. It refreshes the record every
half lease, with a TTL of two leases, so a dead worker drops out of ``chalk
health`` by itself; a worker that stops deletes it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from importlib import metadata

import redis

from chalk_client.cluster import keys
from chalk_client.cluster.connection import connect, redacted
from chalk_client.cluster.lanes import waiting_lanes
from chalk_client.cluster.presence import WorkerPresence
from chalk_client.errors import ConfigurationError
from chalk_client.jobs import PRIORITIES
from chalk_client.settings import ChalkSettings
from chalk_client.store_errors import store_error
from chalk_worker import metrics
from chalk_worker.judges.programs.languages import toolchains
from chalk_worker.llm.client import configured_api_key, configured_base_url
from chalk_worker.sandbox import detect_layers
from chalk_worker.sandbox.warm import warm_python_report

log = logging.getLogger(__name__)

WAIT_INTERVAL_S = 1.0
"""How often a starting worker asks whether Redis answers."""
REMIND_S = 30.0
"""How often it says again that it is still waiting."""


def wait_for_redis(url: str, *, interval_s: float = WAIT_INTERVAL_S) -> float:
    """Block until Redis at ``url`` answers a PING; returns the seconds waited.

    Says once that it waits and why (the connection error, a wrong password...),
    again every ``REMIND_S`` seconds, and when Redis answers.
    """
    client = connect(url)
    started = time.monotonic()
    said = 0.0
    try:
        while True:
            try:
                client.ping()
                break
            except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError) as exc:
                waited = time.monotonic() - started
                advice = store_error(exc, url)  # what to do, for a wrong setting
                why = str(advice if isinstance(advice, ConfigurationError) else exc).rstrip(".")
                if not said:
                    log.warning(
                        "waiting for Redis at %s (CHALK_REDIS_URL): %s. This worker starts "
                        "taking jobs once Redis answers (asking every %.0f s)",
                        redacted(url),
                        why,
                        interval_s,
                    )
                    said = waited or 1e-9
                elif waited - said >= REMIND_S:
                    log.warning(
                        "still waiting for Redis at %s after %.0f s: %s",
                        redacted(url),
                        waited,
                        why,
                    )
                    said = waited
            time.sleep(interval_s)
    finally:
        client.close()
    waited = time.monotonic() - started
    if said:
        log.warning("Redis at %s answers after %.0f s; starting", redacted(url), waited)
    return waited


def chalk_version() -> str:
    """The installed chalk-queue version."""
    try:
        return metadata.version("chalk-queue")
    except metadata.PackageNotFoundError:
        return "unknown"


class PresencePublisher(threading.Thread):
    """Keeps ``chalk:worker:NODE`` fresh while the worker lives; deletes it on ``stop``."""

    def __init__(
        self,
        url: str,
        presence: WorkerPresence,
        *,
        interval_s: float,
        held: Callable[[], list[str]] | None = None,
    ) -> None:
        super().__init__(name="chalk-presence", daemon=True)
        self.client = connect(url)
        self.presence = presence
        self.key = keys.worker(presence.node)
        self.interval_s = interval_s
        self.ttl_ms = max(int(interval_s * 4 * 1000), 1000)
        self.held = held
        self.stopped = threading.Event()

    def publish(self) -> None:
        """Write the record now (errors are left to the lease keeper to report)."""
        self.presence.seen = time.time()
        if self.held is not None:
            self.presence.running = len(self.held())
        try:
            self.client.set(self.key, self.presence.model_dump_json(), px=self.ttl_ms)
            waiting: dict[str, int] = dict.fromkeys(PRIORITIES, 0)
            for lane in waiting_lanes(self.client, self.presence.queue):
                waiting[lane.priority] += lane.waiting
            metrics.jobs_waiting(waiting)
        except redis.RedisError as exc:
            log.debug("could not publish this worker's presence: %s", exc)

    def run(self) -> None:
        """Publish every ``interval_s`` until stopped."""
        while not self.stopped.wait(self.interval_s):
            self.publish()

    def stop(self) -> None:
        """Stop publishing and remove the record: this worker is leaving."""
        self.stopped.set()
        with contextlib.suppress(redis.RedisError):  # else it expires by itself
            self.client.delete(self.key)


_publisher: PresencePublisher | None = None


def start_presence(
    settings: ChalkSettings,
    url: str,
    *,
    node: str,
    pool: str,
    concurrency: int,
    metrics_port: int | None,
    held: Callable[[], list[str]] | None,
) -> PresencePublisher:
    """Publish this worker's presence now and keep it fresh (one publisher per process)."""
    global _publisher
    if _publisher is not None:
        _publisher.stop()
    now = time.time()
    layers = detect_layers(settings.sandbox_tune_cgroups)
    presence = WorkerPresence(
        node=node,
        host=socket.gethostname(),
        pid=os.getpid(),
        pool=pool,
        concurrency=concurrency,
        queue=settings.queue,
        started=now,
        seen=now,
        version=chalk_version(),
        sandbox=[*layers.report(), warm_python_report(settings, layers)],
        metrics_port=metrics_port,
        llm_server=redacted(configured_base_url(settings)),
        llm_model=settings.rubric_model,
        llm_key=configured_api_key(settings) is not None,
        languages=toolchains().report(),
    )
    _publisher = PresencePublisher(
        url, presence, interval_s=max(settings.lease_s / 2, 0.5), held=held
    )
    _publisher.publish()
    _publisher.start()
    return _publisher


def stop_presence() -> None:
    """Remove this worker's presence (at shutdown)."""
    global _publisher
    if _publisher is not None:
        _publisher.stop()
        _publisher = None
