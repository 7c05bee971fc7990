"""``SentinelCluster`` (tests/sentinel_cluster.py) does what it says, seen from plain redis-py.

Its replica follows the master; killing the master makes the sentinels promote the
replica within seconds; a ``Sentinel(...).master_for`` client that failed while the
master was down writes to the promoted one afterwards.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from processes import need
from redis.sentinel import Sentinel
from sentinel_cluster import SentinelCluster

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SentinelCluster]:
    if shutil.which("redis-server") is None:
        need("redis-server")
    with SentinelCluster(tmp_path, password="p@ss/word") as cluster:
        yield cluster


@contextmanager
def sentinels_of(cluster: SentinelCluster, **kwargs: Any) -> Iterator[Sentinel]:
    """A redis-py ``Sentinel`` asking the cluster's sentinels; their connections closed after."""
    sentinel = Sentinel([("127.0.0.1", port) for port in cluster.sentinel_ports], **kwargs)
    try:
        yield sentinel
    finally:
        for client in sentinel.sentinels:
            client.close()


def test_a_failover_promotes_the_replica_and_clients_follow(cluster: SentinelCluster):
    ports = cluster.sentinel_ports
    assert cluster.url(3) == (
        f"sentinel://:p%40ss%2Fword@127.0.0.1:{ports[0]};sentinel://127.0.0.1:{ports[1]};"
        f"sentinel://127.0.0.1:{ports[2]}/3?master_name=chalk"
    )
    with (
        sentinels_of(
            cluster,
            password="p@ss/word",  # the master's: sentinels ask for none
            socket_timeout=1,
            retry=None,  # fail at once while the master is down, as the test expects
        ) as sentinel,
        sentinel.master_for("chalk") as master,
        sentinel.slave_for("chalk") as replica,
    ):
        check_failover(cluster, master, replica)


def check_failover(cluster: SentinelCluster, master: redis.Redis, replica: redis.Redis) -> None:
    old_port = cluster.master_port
    assert master.connection_pool.get_master_address() == ("127.0.0.1", old_port)

    master.set("before", "1")
    assert master.wait(1, 5000) == 1  # the replica has it
    assert replica.info("replication")["role"] == "slave"
    assert replica.get("before") == b"1"

    assert cluster.kill_master() == old_port
    with pytest.raises(redis.ConnectionError):
        master.set("during", "1")

    new_port = cluster.wait_for_failover(timeout_s=30)  # raises, with the logs, after 30 s
    assert new_port != old_port and cluster.master_port == new_port

    master.set("after", "1")  # the same client, now on the promoted node
    assert master.connection_pool.get_master_address() == ("127.0.0.1", new_port)
    promoted = redis.Redis(port=new_port, password="p@ss/word")
    with promoted:
        assert promoted.info("replication")["role"] == "master"
        assert promoted.mget("before", "after") == [b"1", b"1"]


def test_sentinels_with_a_password_of_their_own(tmp_path: Path):
    if shutil.which("redis-server") is None:
        need("redis-server")
    with SentinelCluster(
        tmp_path, master_name="grading", password="data", sentinel_password="watch"
    ) as cluster:
        port = cluster.sentinel_ports[0]
        assert cluster.url().startswith(f"sentinel://:data@127.0.0.1:{port};")
        assert cluster.url().endswith("/0?master_name=grading&sentinel_password=watch")
        anonymous = redis.Redis(port=port, retry=None)  # redis-py 8 retries 10 times else
        with anonymous, pytest.raises(redis.AuthenticationError):
            anonymous.sentinel_masters()
        with (
            sentinels_of(cluster, sentinel_kwargs={"password": "watch"}, password="data") as s,
            s.master_for("grading") as master,
        ):
            master.set("key", "value")
            assert master.get("key") == b"value"
