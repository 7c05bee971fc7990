"""The cluster the docs' cluster examples run against: the cluster tests' own fixtures.

A private redis-server for the session, emptied before each example, and a real
``chalk worker`` serving it (``tests/cluster/conftest.py``); started only when an
example asks for them.
"""

from __future__ import annotations

from cluster.conftest import redis_server, redis_url, shared_worker

__all__ = ["redis_server", "redis_url", "shared_worker"]
