"""The Redis key layout of a Chalk cluster: every key the client and the workers share.

Every key starts with ``chalk:``; nothing else in the project spells a key.

=========================  ======  ==========================================================
key                        type    what it holds
=========================  ======  ==========================================================
``chalk:job:ID``           hash    the record of an unfinished (or failed) job: ``job`` (the
                                   job as JSON, without its submission), ``blob`` (the
                                   submission's digest or ``""``), ``submitted`` (Redis time,
                                   s), ``submitter`` (the waiter told when it finishes),
                                   ``watched`` (``1``: more waiters in ``chalk:watchers:ID``),
                                   ``queue`` and ``batch`` (where it was sent, its batch or
                                   ``""``), ``attempts`` (starts so far); of its latest
                                   message: ``task`` (its task id), ``pushed`` (when, ms),
                                   ``seq`` (its push number), ``head`` (``1``: pushed at the
                                   queue's head); ``received``/``holder`` (the task id a
                                   consumer took, and which consumer); ``owner`` (the worker
                                   process holding its lease, ``""`` if none),
                                   ``started``/``worker`` (the task id it started, its node);
                                   ``status`` once finished (kept records only); with a
                                   separate broker, ``unpublished`` (the submit publishing
                                   its message; gone once a publish went through). Deleted
                                   when the job succeeds (``CHALK_KEEP_JOBS`` keeps it)
``chalk:blob:SHA256``      string  a submission archive, stored once per content
``chalk:blobref:SHA256``   string  how many unfinished jobs use that archive; the last to
                                   succeed deletes both
``chalk:result:ID``        string  the job's ``JobResult`` as JSON, written once
``chalk:running``          zset    job id -> lease deadline (ms, on Redis's clock)
``chalk:pending``          zset    unfinished job id -> its last sign of life (ms)
``chalk:lane:P:N:Q:B``     list    the messages of batch ``B`` waiting at priority ``P`` (0 high,
                                   1 normal, 2 low) for queue ``Q`` (``N``: its bytes), taken
                                   from the head (``RPOP``), new ones pushed at the tail
``chalk:ring:P:Q``         zset    the lanes of priority ``P`` with waiting messages -> how
                                   many of their messages workers took: the least served
                                   lane gives the next message (fair share between batches)
``chalk:held:CONSUMER``    list    messages a consumer took from the queue and has not
                                   acknowledged (the reliable-queue pattern: ``BLMOVE``);
                                   ``CONSUMER`` is ``QUEUE@NAME:HOST:PID:TOKEN:N`` (the
                                   queue, the worker's node ``NAME@HOST``, its process)
``chalk:consumers``        zset    consumer -> liveness deadline (ms), renewed while it lives
``chalk:pushes``           string  a counter numbering every message pushed to a queue
``chalk:taken``            zset    queue -> the push number of the latest message taken from
                                   it among those pushed at its tail: messages pushed before
                                   it have left the queue
``chalk:reconciler``       string  the worker running the reconciler now, with a TTL
``chalk:watchers:ID``      set     waiters of the job besides its submitter
``chalk:done:WAITER``      list    ids of finished jobs, one list per waiter (a batch, a handle),
                                   kept ``DONE_TTL_S`` after the first id pushed into it
``chalk:batch:BATCH``      list    a batch's job ids, in the order they were given, each once
                                   (also when the batch is sent again under its id)
``chalk:batches``          zset    batch id -> creation time, the most recent kept
``chalk:callback:BATCH``   hash    a batch's callback (``chalk_client.cluster.callbacks``):
                                   ``url``, ``delivery`` (its id, the same on every try),
                                   ``created`` (Redis time, s), ``state`` (``pending``,
                                   ``retrying``, ``delivered``, ``refused``, ``given-up``),
                                   ``cursor`` (how many of the batch's ids, from the first,
                                   have a result), ``finished`` (when all had one, s),
                                   ``attempts`` (tries that reached the receiver or failed
                                   to), ``last_error``, ``last_attempt`` (s), ``status``
                                   (the receiver's last HTTP status), ``delivered`` (when,
                                   s), ``claim`` (the worker sending it now), ``body`` (the
                                   JSON sent, made once); kept ``CHALK_RESULT_TTL_S``
``chalk:callbacks``        zset    batch id -> when its callback is next due (ms, Redis's
                                   clock): checked, sent or tried again; a claimed one,
                                   when its claim lapses. Gone once delivered, refused or
                                   given up
``chalk:worker:NODE``      string  a live worker's presence (JSON ``WorkerPresence``: its
                                   sandbox layers, pool, metrics port), with a TTL
``chalk:verdict:SHA256``   string  a remembered rubric verdict (JSON ``met``, ``reason``),
                                   by ``verdict_key``; kept ``CHALK_RUBRIC_CACHE_TTL_S``
``chalk:llm-rate:SERVER``  string  when the next LLM request to a server may start (µs,
                                   Redis's clock), for ``CHALK_LLM_CLUSTER_REQUESTS_PER_MINUTE``
=========================  ======  ==========================================================

The Celery queue itself is a list named after ``CHALK_QUEUE`` (``chalk`` by default).
With Redis as the broker it holds one token (``~``) per message waiting in a lane, so
its length is the backlog (as Flower shows it) and an idle worker blocks on it
(``BLMOVE``); the messages themselves wait in lanes, by priority and batch, and a
worker takes the next one by a script (``chalk_client.cluster.lanes``). A message
pushed straight into the queue's list (Celery's own ``send_task``) is taken as it
comes. kombu's own ``unacked`` keys are used only by consumers of other queues.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "chalk:"

RUNNING = PREFIX + "running"
"""Sorted set of running jobs, scored by lease deadline."""
BATCHES = PREFIX + "batches"
"""Sorted set of recent batches, scored by creation time."""
CALLBACKS = PREFIX + "callbacks"
"""Sorted set of batches whose callback is not done yet, scored by when it is next due."""
PENDING = PREFIX + "pending"
"""Sorted set of unfinished jobs, scored by when the reconciler next looks at each."""
CONSUMERS = PREFIX + "consumers"
"""Sorted set of queue consumers, scored by their liveness deadline."""
RECONCILER = PREFIX + "reconciler"
"""The lock that lets one worker at a time run the reconciler."""
PUSHES = PREFIX + "pushes"
"""The counter that numbers messages pushed to queues (the reconciler's watermark)."""
TAKEN = PREFIX + "taken"
"""Sorted set of queues, scored by the push number of the latest tail-pushed message taken."""
HELD_PREFIX = PREFIX + "held:"
LANE_PREFIX = PREFIX + "lane:"
RING_PREFIX = PREFIX + "ring:"
JOB_PREFIX = PREFIX + "job:"
BLOBREF_PREFIX = PREFIX + "blobref:"
WORKER_PREFIX = PREFIX + "worker:"
BLOB_PREFIX = PREFIX + "blob:"
RESULT_PREFIX = PREFIX + "result:"
BATCH_PREFIX = PREFIX + "batch:"
CALLBACK_PREFIX = PREFIX + "callback:"
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


def blobref(digest: str) -> str:
    """How many unfinished jobs use the archive ``digest``."""
    return BLOBREF_PREFIX + digest


def result(job_id: str) -> str:
    """The job's result, written once."""
    return RESULT_PREFIX + job_id


def watchers(job_id: str) -> str:
    """The waiters of a job besides its submitter, woken by its next result (a retry's too)."""
    return f"{PREFIX}watchers:{job_id}"


def held(consumer: str) -> str:
    """The messages one consumer took from the queue and has not acknowledged."""
    return HELD_PREFIX + consumer


def done(waiter: str) -> str:
    """The list a waiter blocks on: ids of its jobs that finished."""
    return DONE_PREFIX + waiter


def batch(batch_id: str) -> str:
    """A batch's job ids in order."""
    return BATCH_PREFIX + batch_id


def callback(batch_id: str) -> str:
    """A batch's callback: where it goes, how far it got (a hash)."""
    return CALLBACK_PREFIX + batch_id


def lane(queue: str, rank: int, batch: str) -> str:
    """The messages of ``batch`` (``""``: jobs sent one at a time) waiting at priority
    ``rank`` (0 high, 1 normal, 2 low) for ``queue``; ``chalk_client.cluster.lanes``
    reads the parts back, in Lua, by the queue's length in bytes (as Lua counts)."""
    return f"{LANE_PREFIX}{rank}:{len(queue.encode())}:{queue}:{batch}"


def ring(queue: str, rank: int) -> str:
    """The lanes of priority ``rank`` with waiting messages for ``queue``, by service."""
    return f"{RING_PREFIX}{rank}:{queue}"


def worker(node: str) -> str:
    """A live worker's presence, by its Celery node name (``name@host``)."""
    return WORKER_PREFIX + node


def verdict(digest: str) -> str:
    """A remembered rubric verdict, by the digest of everything that decided it."""
    return f"{PREFIX}verdict:{digest}"


def llm_rate(server: str) -> str:
    """The cluster's request pacing for one LLM server, by a digest of its base URL."""
    return f"{PREFIX}llm-rate:{server}"


@dataclass(frozen=True)
class Consumer:
    """What a consumer's id says: its queue, its worker's node name, host and process."""

    queue: str
    node: str
    host: str
    pid: str

    @classmethod
    def parse(cls, consumer: str) -> Consumer:
        """Read ``QUEUE@NAME:HOST:PID:TOKEN:N`` (the queue may hold ``@``, names ``:``)."""
        queue, _, rest = consumer.rpartition("@")
        name, host, pid, *_ = [*rest.rsplit(":", 4), "?", "?", "?"]
        return cls(queue, f"{name}@{host}", host, pid)


def consumer_id(queue: str, node: str, pid: int, token: str, count: int) -> str:
    """A consumer's id: its queue, its worker's node (``NAME@HOST``), process and number."""
    name, _, host = node.partition("@")
    return f"{queue}@{name}:{host or '?'}:{pid}:{token}:{count}"
