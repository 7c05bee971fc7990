"""Where a report's results come from: a results file (JSONL), or a batch on the cluster."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from chalk_client.errors import ConfigurationError, QueueError
from chalk_client.jobs import JobResult
from chalk_client.rollouts import RESULT_START

if TYPE_CHECKING:
    from chalk_client.client import ChalkClient


@dataclass(frozen=True)
class Results:
    """The current result of each job, in the order jobs first appear, and where they came from."""

    results: list[JobResult]
    source: str
    unfinished: Counter[str] = field(default_factory=Counter)
    """A batch's jobs without a result yet, by state: ``queued``, ``running``, ``unknown``."""
    torn: bool = False
    """Whether a half-written last line (an interrupted ``chalk score``) was left out."""


def read_results_file(path: str | os.PathLike[str]) -> Results:
    """The results of a ``chalk score`` output file: the last line for each id is its result.

    A half-written last line is left out. Raises ``ConfigurationError`` naming the
    first line that is not a result, or when the file cannot be read.
    """
    results: dict[str, JobResult] = {}
    torn = False
    try:
        with open(path, "rb") as lines:
            for number, raw in enumerate(lines, start=1):
                if not raw.strip():
                    continue
                try:
                    result = JobResult.model_validate_json(raw)
                except ValidationError:
                    if not raw.endswith(b"\n") and raw.startswith(RESULT_START):
                        torn = True
                        break
                    raise ConfigurationError(
                        f"{path}:{number} is not a result of chalk score; give chalk report "
                        "the --out file of chalk score (one JobResult as JSON per line)"
                    ) from None
                results[result.job_id] = result  # the last line wins, in the first's place
    except FileNotFoundError:
        raise ConfigurationError(
            f"no results file at {path}; give the --out file of chalk score, or --batch ID"
        ) from None
    except OSError as exc:
        raise ConfigurationError(f"could not read {path}: {exc.strerror or exc}") from exc
    return Results(list(results.values()), source=str(Path(path)), torn=torn)


def read_batch(client: ChalkClient, batch_id: str) -> Results:
    """A batch's results as the cluster holds them now; unfinished jobs are counted by state.

    Raises ``QueueError`` when the batch is unknown (never submitted, or expired).
    """
    from chalk_client.cluster.connection import redacted

    ids = list(dict.fromkeys(client.store.batch_ids(batch_id)))
    if not ids:
        raise QueueError(
            f"no batch {batch_id!r} in the cluster at {redacted(client.redis_url)} (never "
            "submitted, or expired after CHALK_RESULT_TTL_S); `chalk status` lists recent batches"
        )
    found = client.store.results(ids)
    pending = [job_id for job_id, result in zip(ids, found, strict=True) if result is None]
    unfinished: Counter[str] = Counter()
    for state in client.store.states(pending):
        unfinished[
            "unknown"
            if not state.recorded
            else "running"
            if state.running or state.finished
            else "queued"
        ] += 1
    results = [result for result in found if result is not None]
    return Results(
        results, source=f"batch {batch_id} at {redacted(client.redis_url)}", unfinished=unfinished
    )
