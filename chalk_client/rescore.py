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
from typing import TYPE_CHECKING, Any

from chalk_client import keys
from chalk_client.store import reaching

if TYPE_CHECKING:
    from chalk_client.client import ChalkClient

CLEAR_FINISHED = """
-- KEYS: result, job, owner
-- 'running' (a worker holds the job: left alone), 'none' (no result), or 'cleared'.
if redis.call('EXISTS', KEYS[3]) == 1 then return 'running' end
if redis.call('EXISTS', KEYS[1]) == 0 then return 'none' end
redis.call('DEL', KEYS[1], KEYS[2])
return 'cleared'
"""
CHUNK = 1000


def clear_results(client: ChalkClient, job_ids: Sequence[str]) -> int:
    """Clear the results (and records) of those of ``job_ids`` that finished; returns how many.

    Raises a ``QueueError`` when Redis cannot be reached or refuses.
    """
    script = client.store.redis.register_script(CLEAR_FINISHED)
    cleared = 0
    with reaching(client.redis_url):
        for start in range(0, len(job_ids), CHUNK):
            pipe = client.store.redis.pipeline(transaction=False)
            for job_id in job_ids[start : start + CHUNK]:
                script(
                    keys=[keys.result(job_id), keys.job(job_id), keys.owner(job_id)],
                    client=pipe,
                )
            replies: list[Any] = pipe.execute()
            cleared += sum(1 for reply in replies if reply in (b"cleared", "cleared"))
    return cleared
