"""The Redis key layout of a Chalk cluster: every key the client and the workers share.

Every key starts with ``chalk:``; nothing else in the project spells a key.

=========================  ======  ==========================================================
key                        type    what it holds
=========================  ======  ==========================================================
``chalk:job:ID``           hash    the job record: ``job`` (the job as JSON, without its
                                   submission), ``blob`` (the submission's digest or ``""``),
                                   ``submitted`` (Redis time, seconds), ``submitter`` (the
                                   waiter of the submit that recorded it), ``base`` (the
                                   job's attempts then), and, with a separate broker,
                                   ``unpublished`` (the submit publishing its message; gone
                                   once a publish went through)
``chalk:blob:SHA256``      string  a submission archive, stored once per content
``chalk:result:ID``        string  the job's ``JobResult`` as JSON, written once
``chalk:attempts:ID``      string  how many times a worker started the job
``chalk:owner:ID``         string  the worker process that holds the job's lease
``chalk:running``          zset    job id -> lease deadline (ms, on Redis's clock)
``chalk:watchers:ID``      set     the waiters to tell when the job finishes
``chalk:done:WAITER``      list    ids of finished jobs, one list per waiter (a batch, a handle),
                                   kept ``DONE_TTL_S`` after the last id pushed
``chalk:batch:BATCH``      list    a batch's job ids, in the order they were given, each once
                                   (also when the batch is sent again under its id)
``chalk:batches``          zset    batch id -> creation time, the most recent kept
``chalk:worker:NODE``      string  a live worker's presence (JSON ``WorkerPresence``: its
                                   sandbox layers, pool, metrics port), with a TTL
``chalk:verdict:SHA256``   string  a remembered rubric verdict (JSON ``met``, ``reason``),
                                   by ``verdict_key``; kept ``CHALK_RUBRIC_CACHE_TTL_S``
``chalk:llm-rate:SERVER``  string  when the next LLM request to a server may start (µs,
                                   Redis's clock), for ``CHALK_LLM_CLUSTER_REQUESTS_PER_MINUTE``
=========================  ======  ==========================================================

The Celery queue itself (a list named after ``CHALK_QUEUE``, ``chalk`` by default) is
kombu's, as are its ``unacked`` bookkeeping keys.
"""

from __future__ import annotations

PREFIX = "chalk:"

RUNNING = PREFIX + "running"
"""Sorted set of running jobs, scored by lease deadline."""
BATCHES = PREFIX + "batches"
"""Sorted set of recent batches, scored by creation time."""
OWNER_PREFIX = PREFIX + "owner:"
WORKER_PREFIX = PREFIX + "worker:"
BLOB_PREFIX = PREFIX + "blob:"
RESULT_PREFIX = PREFIX + "result:"
DONE_PREFIX = PREFIX + "done:"

RECENT_BATCHES_KEPT = 1000
"""How many batch ids ``chalk:batches`` remembers."""
DONE_TTL_S = 300
"""How long a waiter's done list outlives the last id pushed to it.

A waiting client reads its list at least every few seconds; one that stops
reading (its wait ended) leaves a list that soon expires. A client that comes
back later reads the results themselves, not the list.
"""


def job(job_id: str) -> str:
    """The job record (a hash)."""
    return f"{PREFIX}job:{job_id}"


def blob(digest: str) -> str:
    """A submission archive, by the sha256 of its bytes."""
    return BLOB_PREFIX + digest


def result(job_id: str) -> str:
    """The job's result, written once."""
    return RESULT_PREFIX + job_id


def attempts(job_id: str) -> str:
    """The count of starts of the job."""
    return f"{PREFIX}attempts:{job_id}"


def owner(job_id: str) -> str:
    """The lease holder of a running job."""
    return OWNER_PREFIX + job_id


def watchers(job_id: str) -> str:
    """The waiters of a job, woken by its next result (a retried job's too)."""
    return f"{PREFIX}watchers:{job_id}"


def done(waiter: str) -> str:
    """The list a waiter blocks on: ids of its jobs that finished."""
    return DONE_PREFIX + waiter


def batch(batch_id: str) -> str:
    """A batch's job ids in order."""
    return f"{PREFIX}batch:{batch_id}"


def worker(node: str) -> str:
    """A live worker's presence, by its Celery node name (``name@host``)."""
    return WORKER_PREFIX + node


def verdict(digest: str) -> str:
    """A remembered rubric verdict, by the digest of everything that decided it."""
    return f"{PREFIX}verdict:{digest}"


def llm_rate(server: str) -> str:
    """The cluster's request pacing for one LLM server, by a digest of its base URL."""
    return f"{PREFIX}llm-rate:{server}"
