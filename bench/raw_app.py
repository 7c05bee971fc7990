"""The baseline: a hand-written raw Celery app with a no-op task, configured like Chalk's.

Same broker and result store (``BENCH_REDIS_URL``), same pool (threads, 64 slots),
late acks, prefetch of one per slot, events on: only the task differs.
"""

from __future__ import annotations

import os

from celery import Celery

app = Celery("bench_raw", set_as_current=False)
app.conf.update(
    broker_url=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"),
    result_backend=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"),
    accept_content=["json"],
    result_accept_content=["json"],
    task_serializer="json",
    result_serializer="json",
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_default_queue="bench-raw",
    worker_pool="threads",
    worker_concurrency=64,
    worker_send_task_events=True,
    task_send_sent_event=True,
)


@app.task(name="bench.noop")
def noop() -> None:
    """Do nothing: the cost of Celery itself."""
