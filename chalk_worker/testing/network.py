"""Hosts on a private network, built from network namespaces on this machine.

For tests and benchmarks of what crosses a real network: Redis on one host,
workers on others, a client on another, links cut and healed, slowed and made
lossy. Each host is a network namespace (or, with ``netns=False``, the calling
process's own, so a test's in-process client is a host too) joined by a veth pair
to a bridge in a hub namespace of its own. Addresses come from a private /24 that
nothing else on the machine routes; no host has a route anywhere else.

A slowed host's link is two TAP devices joined by ``chalk_worker.testing.link``
(a user-space emulator: this kernel may have no ``netem``). Cutting a link sets
its hub end down: frames are lost both ways, as on a pulled cable, and TCP on
either side sees silence, not a reset.

Processes start on a host with ``nsenter --net=``: only the network namespace
changes, so ``/sys`` and the cgroups (the sandbox's memory, pids and kill layers)
are the machine's, as they are for a worker on a real host (``ip netns exec``
remounts ``/sys``). Everything is torn down on exit, and namespaces a killed run
left behind are removed by the next one. Linux, as root, with iproute2.

    with Network() as net:
        redis_host = net.add_host("redis")
        worker = net.add_host("w1", delay_ms=100, jitter_ms=30, loss=0.03)
        client = net.add_host("client", netns=False)
        url = start_redis(redis_host)
        ...
        worker.cut(); worker.heal()
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from types import TracebackType

import psutil

PREFIX = "chalk-net-"
"""Namespaces of this module are named ``chalk-net-<pid>-<n>-<host>``."""
_serial = itertools.count()


def available() -> str | None:
    """Why hosts cannot be built here (not root, no ``ip``/``nsenter``...), or ``None``."""
    if sys.platform != "linux":
        return "network namespaces are Linux's"
    if os.geteuid() != 0:
        return "building network namespaces needs root"
    for tool in ("ip", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian: apt-get install iproute2 util-linux)"
    if not os.path.exists("/dev/net/tun"):
        return "/dev/net/tun is missing (slowed links need TAP devices)"
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def sweep_leftovers() -> None:
    """Remove the namespaces and devices of runs whose process is gone."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for name in re.findall(rf"^({re.escape(PREFIX)}(\d+)-\S+)", listed, re.MULTILINE):
        if not psutil.pid_exists(int(name[1])):
            subprocess.run(["ip", "netns", "del", name[0]], capture_output=True)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for dev, pid in re.findall(r"^\d+: (ck(\d+)x\w*?)[@:]", links, re.MULTILINE):
        if not psutil.pid_exists(int(pid)):
            subprocess.run(["ip", "link", "del", dev], capture_output=True)


@dataclass
class Host:
    """One host of a ``Network``: its namespace (``None``: the caller's) and address."""

    name: str
    address: str
    netns: str | None
    hub_device: str
    network: Network
    link: subprocess.Popen[bytes] | None = None

    @property
    def netns_path(self) -> str:
        """The namespace's file (for ``nsenter --net=``)."""
        if self.netns is None:
            return f"/proc/{os.getpid()}/ns/net"
        return f"/run/netns/{self.netns}"

    def command(self, *argv: str) -> list[str]:
        """``argv`` run on this host (through ``nsenter --net=``)."""
        if self.netns is None:
            return list(argv)
        return ["nsenter", f"--net={self.netns_path}", "--", *argv]

    def popen(self, *argv: str, **kwargs: object) -> subprocess.Popen[bytes]:
        """Start ``argv`` on this host (``subprocess.Popen``'s keyword arguments)."""
        return subprocess.Popen(self.command(*argv), **kwargs)  # type: ignore[call-overload, no-any-return]

    def cut(self) -> None:
        """Cut this host off: every frame to or from it is lost until ``heal``."""
        self.network.hub_ip("link", "set", self.hub_device, "down")

    def heal(self) -> None:
        """Join this host to the network again."""
        self.network.hub_ip("link", "set", self.hub_device, "up")


@dataclass
class Network:
    """A private network of hosts in namespaces, torn down on exit (see the module)."""

    serial: int = field(default_factory=lambda: next(_serial))
    hosts: list[Host] = field(default_factory=list)
    subnet: str = ""
    _root_devices: list[str] = field(default_factory=list)
    _made: list[str] = field(default_factory=list)
    _processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def tag(self) -> str:
        return f"{os.getpid()}-{self.serial}"

    @property
    def hub(self) -> str:
        return f"{PREFIX}{self.tag}-hub"

    def __enter__(self) -> Network:
        why = available()
        if why is not None:
            raise RuntimeError(f"cannot build test hosts: {why}")
        sweep_leftovers()
        self.subnet = _free_subnet()
        try:
            self._add_netns(self.hub)
            self.hub_ip("link", "add", "br0", "type", "bridge")
            self.hub_ip("link", "set", "br0", "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def hub_ip(self, *args: str) -> None:
        """``ip`` in the hub's namespace."""
        _ip("-n", self.hub, *args)

    def _add_netns(self, name: str) -> None:
        _ip("netns", "add", name)
        self._made.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def add_host(
        self,
        name: str,
        *,
        netns: bool = True,
        delay_ms: float = 0.0,
        jitter_ms: float = 0.0,
        loss: float = 0.0,
        both_ways: bool = False,
    ) -> Host:
        """A new host; slowed (from it, or ``both_ways``) if given a delay or a loss."""
        index = len(self.hosts) + 1
        address = f"{self.subnet}.{index}"
        space = f"{PREFIX}{self.tag}-{name}" if netns else None
        if space is not None:
            self._add_netns(space)
        device = "eth0" if space is not None else f"ck{os.getpid()}x{self.serial}h{index}"[:15]
        hub_device = f"p{index}"
        in_host = ["-n", space] if space is not None else []
        slowed = delay_ms > 0 or loss > 0
        host = Host(name, address, space, hub_device, self)
        if slowed:
            _ip(*in_host, "tuntap", "add", "dev", device, "mode", "tap")
            self.hub_ip("tuntap", "add", "dev", hub_device, "mode", "tap")
            if space is None:
                self._root_devices.append(device)
            # fmt: off
            link = [
                sys.executable, "-m", "chalk_worker.testing.link",
                host.netns_path, device, f"/run/netns/{self.hub}", hub_device,
                "--delay-ms", str(delay_ms), "--jitter-ms", str(jitter_ms), "--loss", str(loss),
                "--seed", str(index),
            ]
            # fmt: on
            if both_ways:
                link.append("--both-ways")
            host.link = subprocess.Popen(link)
            self._processes.append(host.link)
        else:
            temporary = f"ck{os.getpid()}x{self.serial}t{index}"[:15]
            _ip("link", "add", temporary, "type", "veth", "peer", "name", hub_device)
            _ip("link", "set", hub_device, "netns", self.hub)
            if space is not None:
                _ip("link", "set", temporary, "netns", space)
                _ip("-n", space, "link", "set", temporary, "name", device)
            else:
                _ip("link", "set", temporary, "name", device)
                self._root_devices.append(device)
        self.hub_ip("link", "set", hub_device, "master", "br0")
        self.hub_ip("link", "set", hub_device, "up")
        _ip(*in_host, "addr", "add", f"{address}/24", "dev", device)
        _ip(*in_host, "link", "set", device, "up")
        self.hosts.append(host)
        return host

    def close(self) -> None:
        """Stop the links' emulators and remove every namespace and device made."""
        for proc in self._processes:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self._processes:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for device in self._root_devices:
            subprocess.run(["ip", "link", "del", device], capture_output=True)
        for name in reversed(self._made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self._made.clear()
        self._root_devices.clear()


def _free_subnet() -> str:
    """A /24 of 10.0.0.0/8 (as ``10.a.b``) that no route of this machine touches."""
    routes = subprocess.run(["ip", "-o", "route", "show"], capture_output=True, text=True).stdout
    taken = set(re.findall(r"\b(10\.\d+\.\d+)\.\d+", routes))
    for _ in range(100):
        candidate = f"10.{random.randint(160, 250)}.{random.randint(0, 255)}"
        if candidate not in taken:
            return candidate
    raise RuntimeError("no free private /24 found for the test network")


def start_redis(host: Host, *args: str, port: int = 6379) -> tuple[subprocess.Popen[bytes], str]:
    """redis-server on ``host``, keeping nothing on disk; the process and its URL.

    ``args`` are more of its flags. The caller stops it (``redis_server.stop``).
    """
    # fmt: off
    proc = host.popen(
        "redis-server", "--port", str(port), "--bind", host.address, "--save", "",
        "--appendonly", "no", "--dir", tempfile.gettempdir(), "--protected-mode", "no", *args,
        stdout=subprocess.DEVNULL,
    )
    # fmt: on
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        probe = subprocess.run(
            host.command("redis-cli", "-h", host.address, "-p", str(port), "ping"),
            capture_output=True,
            text=True,
        )
        if probe.stdout.strip() == "PONG":
            return proc, f"redis://{host.address}:{port}/0"
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait()
    raise RuntimeError(f"redis-server did not start on {host.name} ({host.address}:{port})")
