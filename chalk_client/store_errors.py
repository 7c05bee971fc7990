"""Redis errors as ``ChalkError``s: callers of the client never see a raw ``redis`` exception.

An unreachable Redis is ``QueueUnavailableError``, one out of memory
``StoreFullError``, a read-only replica or a refused command (an ACL's too)
``StoreRefusedError``, refused credentials or a missing client certificate
``ConfigurationError``; each message names the Redis (without its password)
and says what to do.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis
import redis.sentinel

from chalk_client.cluster.connection import shown_url
from chalk_client.errors import (
    ChalkError,
    ConfigurationError,
    QueueError,
    QueueUnavailableError,
    StoreFullError,
    StoreRefusedError,
)


def store_error(exc: redis.RedisError, url: str) -> ChalkError:
    """The ``ChalkError`` a Redis error means, saying what to do about it."""
    where = shown_url(url)
    if isinstance(exc, (redis.AuthenticationError, redis.exceptions.AuthorizationError)):
        return ConfigurationError(
            f"Redis at {where} refused the credentials: {str(exc).rstrip('.')}. Check the "
            "user and password in CHALK_REDIS_URL."
        )
    if isinstance(exc, redis.sentinel.MasterNotFoundError):
        return QueueUnavailableError(
            f"the sentinels of {where} name no master: none answered, they refused the "
            "sentinel_password, they watch no master by that master_name, or a failover is "
            "under way. Check the sentinels and CHALK_REDIS_URL."
        )
    if isinstance(exc, redis.ConnectionError) and (refused := _no_certificate(exc, url)):
        return ConfigurationError(
            f"Redis at {where} {refused} ({str(exc).rstrip('.')}), and CHALK_REDIS_URL gives "
            "none: add ssl_certfile=/path/client.crt&ssl_keyfile=/path/client.key (a "
            "certificate its tls-ca-cert-file signed, and its key) to the rediss:// URL's query."
        )
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return QueueUnavailableError(
            f"cannot reach Redis at {where}: {str(exc).rstrip('.')}. Is it running? "
            "Check CHALK_REDIS_URL."
        )
    if isinstance(exc, redis.exceptions.OutOfMemoryError):
        return StoreFullError(
            f"Redis at {where} is out of memory: its used memory is over maxmemory, so it "
            f"refuses writes ({exc}). Free memory (raise maxmemory, shorten "
            "CHALK_RESULT_TTL_S/CHALK_JOB_TTL_S, delete old results), then try again."
        )
    if isinstance(exc, redis.exceptions.ReadOnlyError):
        return StoreRefusedError(
            f"Redis at {where} is a read-only replica ({exc}): point CHALK_REDIS_URL at "
            "the primary."
        )
    if isinstance(exc, redis.ResponseError) and "db index is out of range" in str(exc).lower():
        return ConfigurationError(
            f"Redis at {where} has no such database ({exc}): the number after the last '/' "
            "in CHALK_REDIS_URL must be below Redis's `databases` setting (16 by default)."
        )
    if isinstance(exc, redis.exceptions.NoPermissionError):
        return StoreRefusedError(
            f"Redis at {where} does not let the user of CHALK_REDIS_URL do this: "
            f"{str(exc).rstrip('.')}. Its ACL lacks a permission this part of the cluster "
            "needs: give it the user of its role (client, worker, monitor, flower) as "
            "`chalk acl` prints them."
        )
    if isinstance(exc, redis.ResponseError):
        return StoreRefusedError(
            f"Redis at {where} refused a command: {exc}. Check its log and settings "
            "(persistence, ACLs, memory) and that nothing else writes chalk:* keys."
        )
    return QueueError(f"talking to Redis at {where} failed: {type(exc).__name__}: {exc}")


def _no_certificate(exc: redis.ConnectionError, url: str) -> str | None:
    """How Redis refused a TLS connection for want of a client certificate, if it did.

    With TLS 1.3 the server checks the client's certificate after the handshake:
    its alert reaches the client's first read (``certificate required``), or its
    closing of the connection the first write (an ``EOF`` in the TLS protocol).
    """
    text = str(exc)
    if not url.startswith("rediss://") or "ssl_certfile=" in url:
        return None
    if "CERTIFICATE_REQUIRED" in text.upper().replace(" ", "_"):
        return "asks for a client certificate (tls-auth-clients yes)"
    if "EOF occurred" in text:
        return "closed the TLS connection: it may ask for a client certificate"
    return None


@contextmanager
def reaching(url: str) -> Iterator[None]:
    """Turn any Redis error into a ``ChalkError`` naming the URL (``store_error``).

    An unreachable Redis is ``QueueUnavailableError``; one out of memory is
    ``StoreFullError``.
    """
    try:
        yield
    except redis.RedisError as exc:
        raise store_error(exc, url) from exc
