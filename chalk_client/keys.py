"""The Redis key layout of a Chalk cluster: every key the client and the workers share.

Every key starts with ``chalk:``; nothing else in the project spells a key.

=========================  ======  ==========================================================
key                        type    what it holds
=========================  ======  ==========================================================
``chalk:job:ID``           hash    the job record: ``job`` (the job as JSON, without its
                                   submission), ``blob`` (the submission's digest or ``""``),
                                   ``submitted`` (Redis time, seconds), ``submitter`` (the
                                   waiter of the submit that recorded it), ``queue`` and
                                   ``batch`` (where it was sent, its batch or ``""``); of its
                                   latest message: ``task`` (its task id), ``pushed`` (when,
                                   ms), ``head`` (``1``: pushed at the head of the queue);
                                   ``received``/``holder`` (the task id a consumer took, and
                                   which consumer), ``started`` (the task id a worker started);
                                   with a separate broker, ``unpublished`` (the submit
                                   publishing its message; gone once a publish went through)
``chalk:blob:SHA256``      string  a submission archive, stored once per content
``chalk:result:ID``        string  the job's ``JobResult`` as JSON, written once
``chalk:attempts:ID``      string  how many times a worker started the job
``chalk:owner:ID``         string  the worker process that holds the job's lease
``chalk:running``          zset    job id -> lease deadline (ms, on Redis's clock)
``chalk:pending``          zset    unfinished job id -> when the reconciler next looks at it (ms)
``chalk:held:CONSUMER``    list    messages a consumer took from the queue and has not
                                   acknowledged (the reliable-queue pattern: ``BLMOVE``)
``chalk:consumers``        zset    consumer -> liveness deadline (ms), renewed while it lives
``chalk:taken:QUEUE``      string  the push time (ms) of the latest message taken from the
                                   queue among those pushed at its tail: messages pushed
                                   before it have left the queue
``chalk:reconciler``       string  the worker running the reconciler now, with a TTL
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

The Celery queue itself is a list named after ``CHALK_QUEUE`` (``chalk`` by default):
new messages are pushed at its tail (``LPUSH``), messages given back or sent again
at its head (``RPUSH``), and workers take them from the head (``BLMOVE ... RIGHT``).
kombu's own ``unacked`` keys are used only by consumers of other queues.
"""

from __future__ import annotations

PREFIX = "chalk:"

RUNNING = PREFIX + "running"
"""Sorted set of running jobs, scored by lease deadline."""
BATCHES = PREFIX + "batches"
"""Sorted set of recent batches, scored by creation time."""
PENDING = PREFIX + "pending"
"""Sorted set of unfinished jobs, scored by when the reconciler next looks at each."""
CONSUMERS = PREFIX + "consumers"
"""Sorted set of queue consumers, scored by their liveness deadline."""
RECONCILER = PREFIX + "reconciler"
"""The lock that lets one worker at a time run the reconciler."""
HELD_PREFIX = PREFIX + "held:"
TAKEN_PREFIX = PREFIX + "taken:"
OWNER_PREFIX = PREFIX + "owner:"
JOB_PREFIX = PREFIX + "job:"
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
    return JOB_PREFIX + job_id


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


def held(consumer: str) -> str:
    """The messages one consumer took from the queue and has not acknowledged."""
    return HELD_PREFIX + consumer


def taken(queue: str) -> str:
    """The queue's watermark: the push time of the latest tail-pushed message taken."""
    return TAKEN_PREFIX + queue


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
