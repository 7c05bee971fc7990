"""The other baseline: the Celery app a user would write instead of Chalk, unchanged.

A broker, a result backend (``BENCH_REDIS_URL``) and one no-op task; every other
setting is Celery's default (early acks, a prefetch of four per slot, no events).
``bench.throughput`` runs it as ``celery worker --pool threads --concurrency 16``.
"""

from __future__ import annotations

import os

from celery import Celery

URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
app = Celery("bench_stock", broker=URL, backend=URL, set_as_current=False)


@app.task(name="bench.stock_noop")
def noop() -> None:
    """Do nothing: the cost of stock Celery itself."""
