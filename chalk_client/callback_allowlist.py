"""Where workers may send batch callbacks: the operator's allowlist, and the checked address.

A callback URL comes from whoever submits a batch; the workers that send it sit
inside the operator's network, next to Redis, metadata services and admin
pages. So a worker sends a callback only to what ``CHALK_CALLBACK_ALLOW`` lists
(comma-separated hostnames, IP addresses and CIDR networks; by default loopback
only: ``127.0.0.0/8`` and ``::1``):

- a host listed by name (exactly, case aside) is allowed whatever it resolves to;
- any other host is resolved, and *every* address it resolves to must be in a
  listed address or network (an IPv4 address written as IPv6, ``::ffff:a.b.c.d``,
  counts as the IPv4 one);
- the request then goes to the address that was checked (``CallbackTarget``):
  a name that resolves elsewhere a moment later (DNS rebinding) changes nothing.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from chalk_client.callbacks import check_callback_url, redact_url
from chalk_client.errors import CallbackRefusedError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolve = Callable[[str, int], Sequence[IPAddress]]
"""Finds the addresses of a host name (and port): ``resolve_addresses``, or a test's own."""

LOOPBACK = ("127.0.0.0/8", "::1")
"""The default allowlist: this machine only."""
DEFAULT_PORTS = {"http": 80, "https": 443}
_HOSTNAME = re.compile(r"^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)(\.[a-z0-9_-]+)*$")


def _plain(address: IPAddress) -> IPAddress:
    """``address`` without an IPv6 zone, and an IPv4-mapped IPv6 address as the IPv4 one."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.scope_id is not None:
            return ipaddress.IPv6Address(str(address).split("%", 1)[0])
    return address


def _name(host: str) -> str:
    """A host name as compared: lower case, without a final dot."""
    return host.lower().rstrip(".")


def _address(host: str) -> IPAddress | None:
    """``host`` as an IP address, or ``None`` if it is a name."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


@dataclass(frozen=True)
class CallbackAllowlist:
    """The hosts (by name) and the addresses (single or networks) callbacks may go to."""

    names: frozenset[str]
    networks: tuple[IPNetwork, ...]

    @classmethod
    def parse(cls, entries: Iterable[str]) -> CallbackAllowlist:
        """The allowlist of ``entries``: names, addresses, CIDRs; ``ValueError`` on a bad one."""
        names: set[str] = set()
        networks: list[IPNetwork] = []
        for entry in (part.strip() for part in entries):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            name = _name(entry)
            if "/" in entry or name.replace(".", "").isdigit() or not _HOSTNAME.match(name):
                raise ValueError(
                    f"{entry!r} is neither a host name, an IP address nor a network "
                    "(CIDR such as 10.0.0.0/8 or fd00::/8)"
                )
            names.add(name)
        return cls(frozenset(names), tuple(networks))

    def allows_name(self, host: str) -> bool:
        """Whether ``host`` is listed by name."""
        return _name(host) in self.names

    def allows_address(self, address: IPAddress) -> bool:
        """Whether ``address`` is in a listed address or network."""
        plain = _plain(address)
        return any(plain in network or address in network for network in self.networks)

    def check(self, host: str, addresses: Sequence[IPAddress]) -> None:
        """Raise ``CallbackRefusedError`` unless ``host``, resolved to ``addresses``, is allowed.

        A host listed by name is allowed; any other needs every one of its
        addresses (at least one) allowed.
        """
        if self.allows_name(host):
            return
        if not addresses:
            raise CallbackRefusedError(f"{host} resolves to no address")
        refused = [str(a) for a in addresses if not self.allows_address(a)]
        if refused:
            listed = ", ".join([*sorted(self.names), *map(str, self.networks)]) or "nothing"
            raise CallbackRefusedError(
                f"{host} resolves to {', '.join(refused)}, not allowed by CHALK_CALLBACK_ALLOW "
                f"(allowed: {listed}); the operator may add the host, its address or its "
                "network to CHALK_CALLBACK_ALLOW on the workers (and on chalk serve)"
            )

    def __str__(self) -> str:
        return ",".join([*sorted(self.names), *map(str, self.networks)])


def resolve_addresses(host: str, port: int) -> list[IPAddress]:
    """Every address the name ``host`` resolves to, each once, in order.

    Raises ``OSError`` (``socket.gaierror``) if the name cannot be resolved now.
    """
    found: list[IPAddress] = []
    for *_, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in found:
            found.append(address)
    return found


@dataclass(frozen=True)
class CallbackTarget:
    """A callback URL checked against the allowlist, pinned to the address that was checked.

    The request goes to ``request_url`` (the URL with the address in place of
    the host), with ``host_header`` as its ``Host``; for https, the TLS
    handshake names ``host`` (SNI) and the certificate is verified against it.
    """

    url: str
    scheme: str
    host: str
    port: int
    address: IPAddress

    @property
    def request_url(self) -> str:
        """The URL to connect to: the checked address and port, the URL's path and query."""
        parts = urlsplit(self.url)
        plain = str(self.address)
        where = f"[{plain}]" if isinstance(self.address, ipaddress.IPv6Address) else plain
        return urlunsplit((self.scheme, f"{where}:{self.port}", parts.path or "/", parts.query, ""))

    @property
    def host_header(self) -> str:
        """The ``Host`` header: the URL's host, and its port unless the scheme's default."""
        name = f"[{self.host}]" if ":" in self.host else self.host
        return name if DEFAULT_PORTS[self.scheme] == self.port else f"{name}:{self.port}"

    def __str__(self) -> str:
        return f"{redact_url(self.url)} ({self.address})"


def check_target(
    url: str, allowlist: CallbackAllowlist, resolve: Resolve = resolve_addresses
) -> CallbackTarget:
    """``url`` resolved, checked against ``allowlist`` and pinned to an allowed address.

    Raises ``InvalidCallbackError`` for a URL of the wrong form,
    ``CallbackRefusedError`` for a host the allowlist does not allow, and
    ``OSError`` when the host cannot be resolved now (worth trying again).
    """
    check_callback_url(url)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    port = parts.port or DEFAULT_PORTS[scheme]
    literal = _address(host)
    addresses = [literal] if literal is not None else list(resolve(host, port))
    try:
        allowlist.check(host, addresses)
    except CallbackRefusedError as exc:
        raise exc.saying(f"callback {redact_url(url)}: {exc}") from None
    if not addresses:
        raise OSError(f"{host} resolves to no address")
    return CallbackTarget(url=url, scheme=scheme, host=host, port=port, address=addresses[0])
