"""Certificates for the TLS tests, made with the ``openssl`` command.

A certificate authority, a server certificate for ``127.0.0.1`` and ``localhost``
(and any names given) that it signed, and a client certificate it signed:
what Redis with ``tls-auth-clients yes`` and its clients need. EC keys: made in
milliseconds, where RSA keys take a good part of a second.
"""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from processes import need


@dataclass(frozen=True)
class Certificates:
    """The files, in one folder."""

    folder: Path

    @property
    def ca(self) -> Path:
        return self.folder / "ca.crt"

    @property
    def server_cert(self) -> Path:
        return self.folder / "redis.crt"

    @property
    def server_key(self) -> Path:
        return self.folder / "redis.key"

    @property
    def client_cert(self) -> Path:
        return self.folder / "client.crt"

    @property
    def client_key(self) -> Path:
        return self.folder / "client.key"

    def query(self, *, client_cert: bool = True) -> str:
        """The ``rediss://`` URL's query: the CA to trust and, if asked, the client's pair."""
        query = f"ssl_cert_reqs=required&ssl_ca_certs={self.ca}"
        if client_cert:
            query += f"&ssl_certfile={self.client_cert}&ssl_keyfile={self.client_key}"
        return query


KEY = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
"""A new EC key for each request, unencrypted."""


def _openssl(arguments: str, cwd: Path) -> None:
    subprocess.run(
        ["openssl", *arguments.split()], cwd=cwd, check=True, capture_output=True, timeout=30
    )


def _alt_name(name: str) -> str:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return f"DNS:{name}"
    return f"IP:{name}"


def make_certificates(folder: Path, *names: str) -> Certificates:
    """A CA and the server's and a client's certificates in ``folder`` (made if missing);
    the server's is good for ``127.0.0.1``, ``localhost`` and ``names`` (host names, or
    IP addresses)."""
    if shutil.which("openssl") is None:
        need("openssl")
    folder.mkdir(parents=True, exist_ok=True)
    _openssl(f"req -x509 {KEY} -keyout ca.key -out ca.crt -days 2 -subj /CN=chalk-test-ca", folder)
    alt = ",".join(["IP:127.0.0.1", "DNS:localhost", *(_alt_name(name) for name in names)])
    (folder / "server.ext").write_text(f"subjectAltName={alt}\n")
    for name, subject, extensions in (
        ("redis", "/CN=localhost", "-extfile server.ext"),
        ("client", "/CN=chalk-client", ""),
    ):
        _openssl(f"req {KEY} -keyout {name}.key -out {name}.csr -subj {subject}", folder)
        _openssl(
            f"x509 -req -in {name}.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
            f"-out {name}.crt -days 2 {extensions}",
            folder,
        )
    return Certificates(folder)
