"""``chalk retry --failed BATCH``: score again only the jobs of a batch whose result is ``failed``.

The jobs are rebuilt from what the cluster kept (each job's record and its
submission archive) and sent again with ``retry_failed``, as a new batch whose
id names the old one (``BATCH-retry-XXXXXX``); their old ``failed`` results are
replaced when they finish, so ``chalk status BATCH`` shows the batch catching up.
A failed job whose record or archive has expired cannot be rebuilt: it is
listed, to be submitted again from its source.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from chalk_client.client import ChalkClient
from chalk_client.cluster import keys
from chalk_client.cluster.script import as_text
from chalk_client.errors import QueueError
from chalk_client.handles import Batch
from chalk_client.jobs import JobStatus, ScoringJob
from chalk_client.records import load_job
from chalk_client.store_errors import reaching

SHOWN = 10
"""Job ids listed per kind in a report."""


@dataclass
class RetryReport:
    """What ``retry_failed`` sent again, and what it could not."""

    batch_id: str
    failed: int = 0
    """Jobs of the batch whose result was ``failed``."""
    retry: Batch | None = None
    """The new batch of the jobs sent again (``None`` when none was)."""
    expired: list[str] = field(default_factory=list)
    """Failed jobs whose record or submission archive has expired."""

    def render(self) -> str:
        """What ``chalk retry`` prints."""
        if not self.failed:
            return f"batch {self.batch_id}: no failed or cancelled job to retry"
        sent = self.retry.total if self.retry is not None else 0
        lines = [
            f"batch {self.batch_id}: {self.failed} failed or cancelled job(s), {sent} sent again"
        ]
        if self.retry is not None:
            lines[0] += f" as batch {self.retry.id} (see `chalk status {self.batch_id}`)"
        if self.expired:
            shown = ", ".join(self.expired[:SHOWN]) + (", ..." if len(self.expired) > SHOWN else "")
            lines.append(
                f"  {len(self.expired)} could not be rebuilt (record or submission expired; "
                f"submit them again from their source): {shown}"
            )
        return "\n".join(lines)


def _rebuild(client: ChalkClient, job_ids: list[str]) -> tuple[list[ScoringJob], list[str]]:
    """The jobs as submitted, from their records and archives; and the ids that expired."""
    store = client.store.redis
    with reaching(client.redis_url):
        pipe = store.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hmget(keys.job(job_id), ["job", "blob"])
        records: list[Any] = pipe.execute()
        digests = {as_text(r[1]) for r in records if r[0] is not None and r[1]}
        archives: dict[str, bytes | None] = {}
        if digests:
            ordered = sorted(digests)
            found: Any = store.mget([keys.blob(d) for d in ordered])
            archives = dict(zip(ordered, found, strict=True))
    jobs: list[ScoringJob] = []
    expired: list[str] = []
    for job_id, (record, digest) in zip(job_ids, records, strict=True):
        name = as_text(digest) if digest else ""
        archive = archives.get(name) if name else None
        if record is None or (name and archive is None):
            expired.append(job_id)
            continue
        jobs.append(load_job(record, archive))
    return jobs, expired


def retry_failed(client: ChalkClient, batch_id: str) -> RetryReport:
    """Send the failed (and cancelled) jobs of ``batch_id`` again; ``QueueError`` if the
    batch is unknown."""
    ids = list(dict.fromkeys(client.store.batch_ids(batch_id)))
    if not ids:
        raise QueueError(f"no batch {batch_id!r} in the cluster (never submitted, or expired)")
    results = client.store.results(ids)
    failed = [
        job_id
        for job_id, result in zip(ids, results, strict=True)
        if result is not None and result.status in (JobStatus.FAILED, JobStatus.CANCELLED)
    ]
    report = RetryReport(batch_id, failed=len(failed))
    if not failed:
        return report
    jobs, report.expired = _rebuild(client, failed)
    if jobs:
        retry_id = f"{batch_id}-retry-{uuid.uuid4().hex[:6]}"
        report.retry = client.submit_batch(jobs, retry_failed=True, batch_id=retry_id)
    return report
