"""Scoring a finished job again on the cluster (``chalk score --rescore``).

A job id is the idempotency key: once it has a result, submitting it again
returns that result. To score it again (under a new judge, after fixing a
scoring script) its result and record are cleared first, atomically and only
if no worker holds it; the next submit then records and queues it afresh, as
``retry_failed`` does for a failed job. A job a worker is scoring now is left
alone: its coming result is the one the caller gets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from chalk_client.cluster.script import Pipeline, as_text, first_error, run_pipeline
from chalk_client.cluster.watch import queue_clear_finished
from chalk_client.store_errors import reaching

if TYPE_CHECKING:
    from chalk_client.client import ChalkClient

CHUNK = 1000


def clear_results(client: ChalkClient, job_ids: Sequence[str]) -> int:
    """Clear the results (and records) of those of ``job_ids`` that finished; returns how many.

    Raises a ``QueueError`` when Redis cannot be reached or refuses.
    """
    cleared = 0
    with reaching(client.redis_url):
        for start in range(0, len(job_ids), CHUNK):
            part = job_ids[start : start + CHUNK]

            def build(pipe: Pipeline, part: Sequence[str] = part) -> None:
                for job_id in part:
                    queue_clear_finished(pipe, job_id)

            replies = run_pipeline(client.store.redis, build)
            error = first_error(replies)
            if error is not None:
                raise error
            cleared += sum(1 for reply in replies if as_text(reply) == "cleared")
    return cleared
