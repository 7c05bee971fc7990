"""Chalk's Redis transport (``chalk_worker.broker.transport``) through Redis Sentinel.

kombu's Sentinel channel asks the sentinels for the master whenever it makes a
connection; this one does the same with everything Chalk's channel adds (held
messages, stray entries). Like Chalk's channel it keeps what it was made with:
the sentinels' addresses are read once from the connection, which Celery may
drop before it is done with the channel.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import redis
import redis.sentinel
from kombu.transport import redis as kombu_redis
from kombu.utils.url import _parse_url

from chalk_client.cluster.sentinel import SentinelOptions
from chalk_worker.broker.transport import HELD_TIMEOUT_S, Channel, Transport


class SentinelChannel(Channel, kombu_redis.SentinelChannel):  # type: ignore[misc]
    """Chalk's channel, its connections made to the master the sentinels name."""

    from_transport_options = (
        *Channel.from_transport_options,
        "master_name",
        "min_other_sentinels",
        "sentinel_kwargs",
        "sentinel_fanout_compat",
        "chalk_sentinels",
    )
    chalk_sentinels: list[list[str | int]] | None = None
    """Every sentinel, ``[host, port]`` (transport option): the broker URL names one."""
    master_name: str | None = None
    sentinel_kwargs: SentinelOptions | None = None
    min_other_sentinels = 0
    _sentinels: list[tuple[str, int]] | None = None

    def _sentinel_addresses(self) -> list[tuple[str, int]]:
        """The sentinels of the broker URL (each ``;``-separated part), read once."""
        if self._sentinels is None and self.chalk_sentinels:
            self._sentinels = [(str(host), int(port)) for host, port in self.chalk_sentinels]
        if self._sentinels is None:
            if self.connection is None or self.connection.client is None:
                raise redis.ConnectionError("the broker connection of this channel is closed")
            client = self.connection.client
            found = []
            for url in client.alt or [client.as_uri(include_password=False)]:
                parts = _parse_url(url)
                if parts.scheme == "sentinel" and parts.hostname:
                    found.append((parts.hostname, parts.port or 26379))
            self._sentinels = found
        return list(self._sentinels)

    def _manager(self, params: dict[str, Any]) -> redis.sentinel.Sentinel:
        """A Sentinel client of this channel's sentinels; ``params`` for the master's side."""
        if self.master_name is None:
            raise ValueError("the 'master_name' transport option must be given")
        kwargs = {key: value for key, value in params.items() if key not in ("host", "port")}
        return redis.sentinel.Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
            self._sentinel_addresses(),
            min_other_sentinels=self.min_other_sentinels,
            sentinel_kwargs=self.sentinel_kwargs,
            **kwargs,
        )

    def _master_name(self) -> str:
        if self.master_name is None:
            raise ValueError("the 'master_name' transport option must be given")
        return self.master_name

    def _sentinel_managed_pool(self, asynchronous: bool = False) -> redis.ConnectionPool:
        manager = self._manager(self._connparams(asynchronous))
        if asynchronous:
            self._async_sentinel_manager = manager
        else:
            self._sentinel_manager = manager
        master: redis.Redis = manager.master_for(self._master_name(), redis.Redis)  # type: ignore[no-untyped-call, unused-ignore]
        return master.connection_pool

    @property
    def broker_url(self) -> str:
        """The broker, for the log (the sentinels and the master's name, no password)."""
        where = ";".join(
            f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            for host, port in self._sentinel_addresses()
        )
        return (
            f"sentinel://{where}/{self._connparams().get('db', 0)}?master_name={self.master_name}"
        )

    def _held_redis(self) -> redis.Redis:
        params = self._connparams()
        params.pop("connection_class", None)  # the Sentinel pool brings its own
        params["socket_timeout"] = params.get("socket_timeout") or HELD_TIMEOUT_S
        params.setdefault("socket_connect_timeout", HELD_TIMEOUT_S)
        key = repr(
            (
                self._sentinel_addresses(),
                self.master_name,
                sorted((k, repr(v)) for k, v in params.items()),
            )
        )
        with _lock:
            client = _held.get(key)
            if client is None:
                client = _held[key] = self._manager(params).master_for(  # type: ignore[no-untyped-call, unused-ignore]
                    self._master_name(), redis.Redis
                )
            return client


_held: dict[str, redis.Redis] = {}
_lock = threading.Lock()


def _forget_held() -> None:
    # The parent's connections and locks are not the child's.
    global _lock
    _held.clear()
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_held)


class SentinelTransport(Transport):
    """Chalk's Redis transport through Redis Sentinel (``sentinel://`` broker URLs)."""

    default_port = 26379
    Channel = SentinelChannel
