"""A Redis Sentinel set-up of real processes for the tests: a master, a replica, three sentinels.

``SentinelCluster(tmp_path)`` starts them with the ``redis-server`` binary on free
loopback ports, waits until the replica is in sync and every sentinel knows the
master, the replica and the two other sentinels, and gives the ``sentinel://`` URL
Chalk Queue takes. A test then kills the master (``kill_master``) and waits for the
sentinels to promote the replica (``wait_for_failover``)::

    with SentinelCluster(tmp_path, password="pw") as cluster:
        client = redis.sentinel.Sentinel(...)  # or Chalk Queue, given cluster.url()
        cluster.kill_master()
        cluster.wait_for_failover()

Sentinels here call a master down after 1 s without an answer (production: 5 s or
more), so a failover takes a few seconds. Each process logs to a file in the
directory; ``logs()`` gives their tails, and every timeout's message includes them.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from urllib.parse import quote, urlencode

import redis
from processes import free_port, stop

DOWN_AFTER_MS = 1000
"""How long a master may not answer before a sentinel calls it down (subjectively)."""

FAILOVER_TIMEOUT_MS = 6000
"""How long a sentinel leads a failover before another may try again."""

QUORUM = 2
"""How many of the three sentinels must agree that the master is down."""


def healthy(state: dict[str, object], role: str) -> bool:
    """Whether a sentinel's view of a node (``SENTINEL MASTER``/``REPLICAS``) has it up
    in ``role`` (``is_master``, ``is_slave``)."""
    down = ("is_sdown", "is_odown", "is_disconnected")
    return bool(state[role]) and not any(state[flag] for flag in down)


@dataclass
class RedisProcess:
    """A ``redis-server`` (data node or sentinel) the cluster started, and its log file."""

    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path


class SentinelCluster:
    """A master, one replica and three sentinels on loopback, in ``workdir``.

    ``password`` is the data nodes' (``requirepass``, and ``masterauth`` so that
    either can follow the other); the sentinels are given it (``auth-pass``).
    ``sentinel_password`` makes the sentinels themselves ask for one. ``aof``
    persists the data nodes (AOF, fsync each second); without it nothing is written.
    """

    def __init__(
        self,
        workdir: Path,
        master_name: str = "chalk",
        password: str | None = None,
        *,
        sentinel_password: str | None = None,
        aof: bool = False,
    ) -> None:
        self.workdir = workdir
        self.master_name = master_name
        self.password = password
        self.sentinel_password = sentinel_password
        self.aof = aof
        self.data_nodes: list[RedisProcess] = []
        """The two data nodes, in the order started: the first master, then its replica."""
        self.sentinels: list[RedisProcess] = []
        self.killed_port: int | None = None
        """The port of the master ``kill_master`` killed last."""

    def __enter__(self) -> SentinelCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def sentinel_ports(self) -> list[int]:
        """The three sentinels' ports."""
        return [sentinel.port for sentinel in self.sentinels]

    @property
    def master_port(self) -> int:
        """The current master's port, as the first sentinel that answers names it."""
        for sentinel in self.sentinels:
            try:
                with self._sentinel_client(sentinel.port) as client:
                    _host, port = client.sentinel_get_master_addr_by_name(self.master_name)
                return int(port)
            except redis.RedisError:
                continue
        raise RuntimeError(f"No sentinel answered for {self.master_name}.\n{self.logs()}")

    def url(self, db: int = 0) -> str:
        """The ``sentinel://`` URL of this cluster, for database ``db``.

        ``sentinel://[:password@]127.0.0.1:p1;sentinel://127.0.0.1:p2;...;/db?master_name=``:
        the password is the master's; ``sentinel_password`` goes in the query.
        """
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        hosts = [f"sentinel://127.0.0.1:{port}" for port in self.sentinel_ports]
        hosts[0] = hosts[0].replace("sentinel://", f"sentinel://{auth}", 1)
        query = {"master_name": self.master_name}
        if self.sentinel_password:
            query["sentinel_password"] = self.sentinel_password
        return f"{';'.join(hosts)}/{db}?{urlencode(query)}"

    def start(self, timeout_s: float = 20.0) -> None:
        """Start the five processes; return once the replica is in sync and the sentinels
        know each other, the master and the replica. Stops them all if that fails."""
        try:
            master = self._start_data_node("redis-1", [])
            self._start_data_node("redis-2", ["--replicaof", "127.0.0.1", str(master.port)])
            self._wait(self._replica_in_sync, timeout_s, "the replica to be in sync")
            for number in (1, 2, 3):
                self._start_sentinel(f"sentinel-{number}", master.port)
            self._wait(self._sentinels_see_all, timeout_s, "the sentinels to know every node")
        except BaseException:
            self.stop()
            raise

    def kill_master(self) -> int:
        """SIGKILL the current master (as the sentinels see it); return its port."""
        port = self.master_port
        node = next(node for node in self.data_nodes if node.port == port)
        node.proc.kill()
        node.proc.wait()
        self.killed_port = port
        return port

    def wait_for_failover(self, timeout_s: float = 30.0) -> int:
        """Wait until every sentinel names the other data node as master, and it says it is
        one (``role:master``); return its port. Call after ``kill_master``."""
        if self.killed_port is None:
            raise RuntimeError("wait_for_failover waits for a new master: call kill_master first")
        promoted = next(node for node in self.data_nodes if node.port != self.killed_port)

        def promoted_everywhere() -> bool:
            for sentinel in self.sentinels:
                with self._sentinel_client(sentinel.port) as client:
                    _host, port = client.sentinel_get_master_addr_by_name(self.master_name)
                if int(port) != promoted.port:
                    return False
            with self._data_client(promoted.port) as client:
                return bool(client.info("replication")["role"] == "master")

        self._wait(promoted_everywhere, timeout_s, f"port {promoted.port} to be promoted")
        return promoted.port

    def stop(self) -> None:
        """Stop every process this cluster started (the sentinels first)."""
        for node in [*self.sentinels, *self.data_nodes]:
            stop(node.proc)

    def logs(self, lines: int = 30) -> str:
        """The last ``lines`` lines of each process's log, under its name and port."""
        parts = []
        for node in [*self.data_nodes, *self.sentinels]:
            status = "running" if node.proc.poll() is None else f"exited {node.proc.returncode}"
            tail = node.log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"==> {node.name} (port {node.port}, {status}) <==\n" + "\n".join(tail))
        return "\n".join(parts)

    def _start_data_node(self, name: str, extra: list[str]) -> RedisProcess:
        persistence = ["--appendonly", "yes", "--appendfsync", "everysec"] if self.aof else []
        auth = ["--requirepass", self.password, "--masterauth", self.password]
        node = self._launch(
            name,
            lambda port, workdir: [
                *["--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir)],
                *["--save", "", "--appendonly", "no", "--databases", "64"],
                # A replica's first sync would otherwise wait 5 s for more replicas to come.
                *["--repl-diskless-sync-delay", "0"],
                *persistence,
                *(auth if self.password else []),
                *extra,
            ],
        )
        self.data_nodes.append(node)
        return node

    def _start_sentinel(self, name: str, master_port: int) -> None:
        def config(port: int, workdir: Path) -> list[str]:
            # A file, not flags: a sentinel rewrites its config with what it learns.
            m = self.master_name
            lines = [
                f"port {port}",
                "bind 127.0.0.1",
                f"dir {workdir}",
                f"sentinel monitor {m} 127.0.0.1 {master_port} {QUORUM}",
                f"sentinel down-after-milliseconds {m} {DOWN_AFTER_MS}",
                f"sentinel failover-timeout {m} {FAILOVER_TIMEOUT_MS}",
                f"sentinel parallel-syncs {m} 1",
            ]
            if self.password:
                lines.append(f"sentinel auth-pass {m} {self.password}")
            if self.sentinel_password:
                # Sentinels talk to each other too: each gives the others this password.
                lines += [
                    f"requirepass {self.sentinel_password}",
                    f"sentinel sentinel-pass {self.sentinel_password}",
                ]
            path = workdir / "sentinel.conf"
            path.write_text("\n".join(lines) + "\n")
            return [str(path), "--sentinel"]

        self.sentinels.append(self._launch(name, config))

    def _launch(self, name: str, args: Callable[[int, Path], list[str]]) -> RedisProcess:
        """Start ``redis-server`` with ``args(port, workdir)`` on a free port: tries another
        port when one is taken between finding it free and binding it (other tests'
        servers run on this machine)."""
        workdir = self.workdir / name
        workdir.mkdir(parents=True, exist_ok=True)
        log = self.workdir / f"{name}.log"
        for _attempt in range(3):
            port = free_port()
            with log.open("ab") as out:
                proc = subprocess.Popen(
                    ["redis-server", *args(port, workdir)], stdout=out, stderr=subprocess.STDOUT
                )
            node = RedisProcess(name, port, proc, log)
            if self._answers(node):
                return node
            stop(proc)
        raise RuntimeError(f"{name} did not start (3 ports tried):\n{log.read_text()}")

    def _answers(self, node: RedisProcess, timeout_s: float = 10.0) -> bool:
        """Whether ``node``'s own process (not another on its port) answers in time."""
        password = self.sentinel_password if node.name.startswith("sentinel") else self.password
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and node.proc.poll() is None:
            try:
                with self._client(node.port, password) as client:
                    if client.info("server")["process_id"] == node.proc.pid:
                        return True
            except redis.RedisError:
                pass
            time.sleep(0.05)
        return False

    def _replica_in_sync(self) -> bool:
        with self._data_client(self.data_nodes[0].port) as client:
            info = client.info("replication")
        return bool(info["connected_slaves"] == 1 and info["slave0"]["state"] == "online")

    def _sentinels_see_all(self) -> bool:
        master_port = self.data_nodes[0].port
        for sentinel in self.sentinels:
            with self._sentinel_client(sentinel.port) as client:
                master = client.sentinel_master(self.master_name)
                replicas = client.sentinel_slaves(self.master_name)
                others = client.sentinel_sentinels(self.master_name)
            # redis-py derives is_* from the flags, a string in RESP2 and a set in RESP3.
            if master["port"] != master_port or not healthy(master, "is_master"):
                return False
            if len(replicas) != 1 or not healthy(replicas[0], "is_slave") or len(others) != 2:
                return False
        return True

    def _wait(self, condition: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if condition():
                    return
            except redis.RedisError:
                pass  # not up yet, or a sentinel still learning
            time.sleep(0.1)
        raise TimeoutError(f"Waited {timeout_s} s for {what}, in vain.\n{self.logs()}")

    def _data_client(self, port: int) -> redis.Redis:
        return self._client(port, self.password)

    def _sentinel_client(self, port: int) -> redis.Redis:
        return self._client(port, self.sentinel_password)

    @staticmethod
    def _client(port: int, password: str | None) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1",
            port=port,
            password=password,
            socket_timeout=2,
            decode_responses=True,
            retry=None,
        )
