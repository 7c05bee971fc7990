"""``chalk health``: is the cluster able to score? Redis, the queue, the live workers.

Each worker publishes its presence (``chalk:worker:NODE``, a ``WorkerPresence``
as JSON) when it is ready and refreshes it while it lives; the key has a TTL,
so a dead worker drops out by itself. The report reads those keys, Redis's own
``INFO`` (version, memory, persistence, eviction policy) and the queue: messages
waiting, messages delivered to live workers and not yet acknowledged (their held
lists), messages stranded on workers that died (held by a consumer whose liveness
lapsed: the other workers give them back within a quarter lease), messages in
kombu's own ``unacked`` hash (older workers, other queues: delivered again after
the visibility timeout), and jobs holding a lease.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import redis

from chalk_client.cli.eta import duration
from chalk_client.cluster import keys
from chalk_client.cluster.connection import redacted
from chalk_client.cluster.presence import WorkerPresence, read_workers
from chalk_client.cluster.script import as_text
from chalk_client.cluster.sentinel import SentinelURL, is_sentinel
from chalk_client.store_errors import reaching

UNACKED_KEY = "unacked"
"""kombu's Redis transport: messages delivered to a consumer and not acknowledged yet."""
UNACKED_INDEX_KEY = "unacked_index"
"""kombu's Redis transport: when each of those was delivered (Unix time)."""
SAFE_EVICTION = "noeviction"
"""The only ``maxmemory-policy`` under which Redis never drops a job record."""


@dataclass(frozen=True)
class RedisFacts:
    """What ``INFO`` says of the cluster's Redis that matters to an operator."""

    version: str
    used_memory: str
    maxmemory_policy: str
    aof: bool
    aof_fsync: str
    rdb_save: str
    """Redis's ``save`` schedule: ``""`` for no RDB snapshots, ``?`` when ``CONFIG`` is refused."""
    role: str = "?"
    """``master``, or ``slave`` for a replica."""
    replicas_online: int = 0
    """Replicas connected to it and in sync (``INFO replication``)."""


@dataclass(frozen=True)
class Holding:
    """The messages one queue consumer took from the queue and has not acknowledged."""

    consumer: str
    """``QUEUE@NAME:HOST:PID:TOKEN:N``: its queue, its worker's node and process."""
    messages: int
    lapses_in_s: float
    """Seconds until its liveness lapses; negative: it lapsed that long ago (it is dead)."""


@dataclass(frozen=True)
class KombuUnacked:
    """Messages in kombu's own ``unacked`` hash: taken by an older worker or another queue's."""

    messages: int
    due_in_s: float | None
    """Seconds until the oldest is delivered again (the visibility timeout), if known."""


@dataclass
class HealthReport:
    """The cluster's state as ``chalk health`` prints it."""

    url: str
    redis: RedisFacts
    queue: str
    waiting: int | None
    """Messages in the queue; ``None`` when the broker is not this Redis."""
    unacknowledged: int | None
    """Messages delivered to live workers and not acknowledged yet."""
    running: int
    workers: list[WorkerPresence] = field(default_factory=list)
    stranded: list[Holding] = field(default_factory=list)
    """Consumers that died holding messages, not given back yet."""
    kombu_unacked: KombuUnacked | None = None
    give_back_s: float = 5.0
    """How often live workers look for dead consumers (a quarter lease)."""
    wait_replicas: int = 0
    """``CHALK_REDIS_WAIT_REPLICAS``: replicas each submit and result waits for."""
    sentinels: tuple[int, int] | None = None
    """Through Sentinel: how many of the URL's sentinels answer, of how many."""
    now: float = field(default_factory=time.time)

    @property
    def problems(self) -> list[str]:
        """What stops the cluster from scoring, in words an operator can act on."""
        found = []
        if not self.workers:
            found.append(
                "no live worker: start one (`chalk worker`, or `docker compose up -d --scale "
                "worker=3`); queued jobs wait for it"
            )
        if self.redis.role == "slave":
            found.append(
                "this Redis is a read-only replica (after a failover?): point CHALK_REDIS_URL at "
                "the master, or at the sentinels (sentinel://...), which always name it"
            )
        if self.wait_replicas > self.redis.replicas_online:
            found.append(
                f"CHALK_REDIS_WAIT_REPLICAS={self.wait_replicas} but {self.redis.replicas_online}"
                " replica(s) are online: every submit fails and every result waits out "
                "CHALK_REDIS_WAIT_TIMEOUT_S; bring the replicas back, or lower it"
            )
        return found

    @property
    def warnings(self) -> list[str]:
        """What risks losing work, or delays it, though the cluster scores now."""
        found = [self._stranded_line(holding) for holding in self.stranded]
        unacked = self.kombu_unacked
        if unacked is not None and unacked.messages:
            when = (
                ""
                if unacked.due_in_s is None
                else f"; the oldest in {duration(max(unacked.due_in_s, 0))}"
            )
            found.append(
                f"{unacked.messages} message(s) in kombu's unacked hash (taken by a worker of an "
                "older version, or a consumer of another queue): delivered again once "
                f"unacknowledged for CHALK_VISIBILITY_TIMEOUT_S{when}"
            )
        if self.redis.maxmemory_policy != SAFE_EVICTION:
            found.append(
                f"Redis maxmemory-policy is {self.redis.maxmemory_policy}: when memory runs out "
                "it may evict job records and results; set it to noeviction"
            )
        if self.sentinels is not None and self.sentinels[0] <= self.sentinels[1] // 2:
            found.append(
                f"only {self.sentinels[0]} of the {self.sentinels[1]} sentinels answer: a "
                "failover needs most of them; bring them back"
            )
        if is_sentinel(self.url) and not self.redis.replicas_online:
            found.append("no replica of the master is online: a failover has nothing to promote")
        missing = sorted(
            {
                name
                for worker in self.workers
                for name, said in (worker.languages or {}).items()
                if _missing(said)
            }
        )
        if missing:
            found.append(
                f"some workers cannot run {', '.join(missing)} programs: tests jobs in those "
                "languages that reach them fail as the grader's error (install the toolchains: "
                "the worker lines say which)"
            )
        if not self.redis.aof and not self.redis.rdb_save:
            found.append(
                "Redis persists nothing (no AOF, no RDB saves): a Redis restart loses every "
                "queued job and result; turn on appendonly yes"
            )
        return found

    def render(self) -> str:
        """The report, several lines."""
        r = self.redis
        persistence = f"AOF on (appendfsync {r.aof_fsync})" if r.aof else "AOF off"
        if r.rdb_save == "?":
            persistence += ", RDB snapshots unknown (CONFIG refused)"
        elif r.rdb_save:
            persistence += f", RDB snapshots on ({r.rdb_save})"
        lines = [
            f"cluster at {redacted(self.url)}",
            f"  Redis {r.version}: reachable, {r.used_memory} used, maxmemory-policy "
            f"{r.maxmemory_policy}, {persistence}",
        ]
        if r.replicas_online or is_sentinel(self.url):
            waits = f", submits and results wait for {self.wait_replicas}" * bool(
                self.wait_replicas
            )
            lines.append(f"  replication: {r.replicas_online} replica(s) online{waits}")
        if self.sentinels is not None:
            lines.append(f"  sentinels: {self.sentinels[0]} of {self.sentinels[1]} answer")
        waiting = "?" if self.waiting is None else str(self.waiting)
        unacked = "" if self.unacknowledged is None else f", {self.unacknowledged} delivered"
        lines.append(
            f"  queue {self.queue}: {waiting} waiting{unacked}; {self.running} job(s) running"
        )
        lines.append(f"  workers: {len(self.workers)} alive")
        for worker in self.workers:
            lines.extend(self._worker_lines(worker))
        lines.extend(f"  PROBLEM: {text}" for text in self.problems)
        lines.extend(f"  WARNING: {text}" for text in self.warnings)
        lines.append("  status: " + ("OK" if not self.problems else "NOT OK"))
        return "\n".join(lines)

    def _stranded_line(self, holding: Holding) -> str:
        consumer = keys.Consumer.parse(holding.consumer)
        queue, node, pid = consumer.queue, consumer.node, consumer.pid
        ago = duration(max(-holding.lapses_in_s, 0))
        if self.workers:
            when = f"live workers give them back within about {duration(self.give_back_s)}"
        else:
            when = "they are given back once a worker runs"
        return (
            f"{holding.messages} message(s) of queue {queue} stranded on a dead worker "
            f"({node}, pid {pid}, silent for {ago}): {when}"
        )

    def _worker_lines(self, worker: WorkerPresence) -> list[str]:
        running = "" if worker.running is None else f", running {worker.running}"
        metrics = "" if worker.metrics_port is None else f", metrics on :{worker.metrics_port}"
        up, seen = duration(self.now - worker.started), duration(self.now - worker.seen)
        head = (
            f"    {worker.node} (pid {worker.pid}, chalk-queue {worker.version}): "
            f"{worker.pool} x{worker.concurrency}{running}, up {up}, seen {seen} ago{metrics}"
        )
        lines = [head, *(f"      {line}" for line in worker.sandbox)]
        if worker.llm_server is not None:
            key = "API key set" if worker.llm_key else "no API key"
            lines.append(f"      LLM: {worker.llm_server}, model {worker.llm_model} ({key})")
        if worker.languages is not None:
            can = [name for name, said in worker.languages.items() if not _missing(said)]
            lines.append(f"      tests judge: {', '.join(can) or 'no language'}")
            lines += [
                f"      tests judge cannot run {name}: {said.removeprefix('missing: ')}"
                for name, said in worker.languages.items()
                if _missing(said)
            ]
        return lines


def _missing(said: str) -> bool:
    return said.startswith("missing:")


def _config(client: redis.Redis, name: str) -> str:
    """A Redis setting, or ``?`` where ``CONFIG`` is refused (an ACL, a managed Redis)."""
    try:
        found: Any = client.config_get(name)
    except redis.ResponseError:
        return "?"
    return str(found.get(name, "?"))


def redis_facts(client: redis.Redis) -> RedisFacts:
    """The operator's view of ``INFO`` and of the persistence settings."""
    try:
        info: Any = client.info()
    except redis.ResponseError:  # refused by an ACL
        info = {}
    return RedisFacts(
        version=str(info.get("redis_version", "?")),
        used_memory=str(info.get("used_memory_human", "?")),
        maxmemory_policy=str(info.get("maxmemory_policy", "?")),
        aof=bool(info.get("aof_enabled")),
        aof_fsync=_config(client, "appendfsync"),
        rdb_save=_config(client, "save").strip(),
        role=str(info.get("role", "?")),
        replicas_online=sum(
            1
            for name, value in info.items()
            if name.startswith("slave")
            and isinstance(value, dict)
            and value.get("state") == "online"
        ),
    )


def read_holdings(client: redis.Redis) -> list[Holding]:
    """Every registered queue consumer and what it holds, as of Redis's clock."""
    seconds, micros = client.time()
    now_ms = seconds * 1000 + micros // 1000
    consumers: Any = client.zrange(keys.CONSUMERS, 0, -1, withscores=True)
    if not consumers:
        return []
    pipe = client.pipeline(transaction=False)
    for consumer, _ in consumers:
        pipe.llen(keys.held(as_text(consumer)))
    counts = pipe.execute()
    return [
        Holding(as_text(consumer), int(count), (deadline - now_ms) / 1000)
        for (consumer, deadline), count in zip(consumers, counts, strict=True)
    ]


def read_kombu_unacked(client: redis.Redis, visibility_timeout_s: float) -> KombuUnacked:
    """What kombu's own ``unacked`` hash holds, and when its oldest message comes back."""
    count = int(client.hlen(UNACKED_KEY))
    oldest: Any = client.zrange(UNACKED_INDEX_KEY, 0, 0, withscores=True) if count else []
    due = oldest[0][1] + visibility_timeout_s - time.time() if oldest else None
    return KombuUnacked(count, due)


def check_health(
    client: redis.Redis,
    url: str,
    queue: str,
    *,
    broker_is_redis: bool = True,
    lease_s: float = 20.0,
    visibility_timeout_s: float = 12 * 3600.0,
    wait_replicas: int = 0,
) -> HealthReport:
    """Look at Redis, the queue and the workers; raises ``QueueUnavailableError`` if unreachable."""
    with reaching(url):
        facts = redis_facts(client)
        pipe = client.pipeline(transaction=False)
        pipe.llen(queue)
        pipe.zcard(keys.RUNNING)
        waiting, running = pipe.execute()
        workers = read_workers(client)
        holdings = read_holdings(client) if broker_is_redis else []
        unacked = read_kombu_unacked(client, visibility_timeout_s) if broker_is_redis else None
    live = [h for h in holdings if h.lapses_in_s > 0 and h.consumer.startswith(f"{queue}@")]
    through = SentinelURL.parse(url) if is_sentinel(url) else None
    return HealthReport(
        url=url,
        redis=facts,
        queue=queue,
        waiting=int(waiting) if broker_is_redis else None,
        unacknowledged=sum(h.messages for h in live) if broker_is_redis else None,
        running=int(running),
        workers=workers,
        stranded=[h for h in holdings if h.lapses_in_s <= 0 and h.messages],
        kombu_unacked=unacked,
        give_back_s=lease_s / 4,
        wait_replicas=wait_replicas,
        sentinels=None if through is None else (answering(through), len(through.sentinels)),
    )


def answering(url: SentinelURL) -> int:
    """How many of the URL's sentinels answer a ``PING``."""
    count = 0
    for host, port in url.sentinels:
        client = redis.Redis(host, port, **url.sentinel_kwargs())
        try:
            count += bool(client.ping())
        except redis.RedisError:
            pass
        finally:
            client.close()
    return count
