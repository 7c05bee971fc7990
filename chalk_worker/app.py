"""The Celery app and its one task, ``chalk.score``: the only module that imports Celery.

Start workers with ``chalk worker`` (or ``celery -A chalk_worker.app worker``).
Settings come from ``CHALK_*`` variables (``ChalkSettings``):

- broker: ``CHALK_BROKER_URL`` if set (e.g. RabbitMQ), else ``CHALK_REDIS_URL``;
  the store (records, archives, results) is always ``CHALK_REDIS_URL``;
- JSON only; late acks, rejected on a lost worker, prefetch of one per slot,
  a visibility timeout longer than any job (``CHALK_VISIBILITY_TIMEOUT_S``);
- ``chalk worker`` starts the threads pool with 64 slots (``--pool`` and
  ``--concurrency`` override): one process holds 64 jobs on its event loop,
  while subprocess judges run at most one per core (the executable judge's pool);
- task events on, for Flower; a job whose result is ``failed`` ends its task with
  ``JobFailedError`` (Flower lists it as ``FAILURE``, with the job's error);
- at start: wait for Redis (saying so), then publish this worker's presence for
  ``chalk health`` and serve its metrics on ``CHALK_METRICS_PORT``;
- on Redis, kombu's transport made to drop (not die on) an entry that is not a message.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Protocol, TypedDict

from celery import Celery
from celery.signals import (
    celeryd_after_setup,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
    worker_shutting_down,
)
from kombu.transport import TRANSPORT_ALIASES
from kombu.utils.url import parse_url

from chalk_client.cluster.connection import is_unix, kombu_socket_url, sentinel_url
from chalk_client.cluster.messages import TASK_NAME, task_queue
from chalk_client.cluster.sentinel import KombuSentinelOptions, SentinelOptions
from chalk_client.errors import ConfigurationError, JobFailedError
from chalk_client.settings import ChalkSettings
from chalk_worker import metrics
from chalk_worker.broker import background, fastjson
from chalk_worker.cluster import delivery, presence, shutdown
from chalk_worker.cluster.consume import WorkerRuntime, worker_runtime, worker_runtime_if_made
from chalk_worker.cluster.delivery import LostAttempt
from chalk_worker.cluster.keeper import Resender
from chalk_worker.metrics import MessageOutcome
from chalk_worker.sandbox import announce, detect_layers

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
"""The store and broker when ``CHALK_REDIS_URL`` is not set."""

SOCKET_TRANSPORT = "chalk"
"""The name of Chalk's Redis transport for kombu, in a broker URL over a Unix socket
(``chalk+socket:///path/to/redis.sock``): kombu reads the transport from that URL."""
TRANSPORT_ALIASES.setdefault(SOCKET_TRANSPORT, "chalk_worker.broker.transport:Transport")

log = logging.getLogger(__name__)
settings = ChalkSettings()
redis_url = settings.redis_url or DEFAULT_REDIS_URL


class TransportOptions(TypedDict, total=False):
    """The broker's transport options Chalk sets (kombu's, and those of Chalk's transports)."""

    visibility_timeout: float
    priority_steps: list[int]
    master_name: str
    sentinel_kwargs: SentinelOptions
    chalk_sentinels: list[list[str | int]]
    chalk_queue: str
    chalk_lease_ms: int


class _TaskRequest(Protocol):
    """What the task reads of Celery's request (``task.request``)."""

    hostname: str | None
    id: str | None


class _BoundTask(Protocol):
    """A bound Celery task, as far as ``_score`` uses it."""

    request: _TaskRequest


class _WorkerNode(Protocol):
    """The sender of ``worker_ready``: Celery's ``WorkController``, as far as used here."""

    hostname: str
    pool: object


def broker_is_store(settings: ChalkSettings, redis_url: str) -> bool:
    """Whether the broker is the store's Redis (the default): its queue is a list there."""
    return not settings.broker_url or settings.broker_url == redis_url


def make_app(settings: ChalkSettings, redis_url: str) -> Celery:
    """A Celery app configured for Chalk Queue."""
    broker_url = settings.broker_url or redis_url
    celery = Celery("chalk", set_as_current=False)
    transport_options: TransportOptions = {"visibility_timeout": settings.visibility_timeout_s}
    backend_url = redis_url
    backend_options: KombuSentinelOptions | dict[str, object] = {}
    through_sentinels = sentinel_url(redis_url)
    if through_sentinels is not None:  # kombu's form, and the master's name as an option
        backend_url = through_sentinels.backend_url()
        backend_options = through_sentinels.kombu_options()
    if is_unix(backend_url):
        backend_url = kombu_socket_url(backend_url)
    if broker_url.startswith(("redis://", "rediss://")):
        celery.conf.broker_transport = "chalk_worker.broker.transport:Transport"
        transport_options["priority_steps"] = [0]  # Chalk sends no priorities: one list
    elif is_unix(broker_url):  # kombu takes the transport from before the URL's '+'
        broker_url = kombu_socket_url(broker_url, transport=SOCKET_TRANSPORT)
        transport_options["priority_steps"] = [0]
    elif (broker_sentinels := sentinel_url(broker_url)) is not None:
        celery.conf.broker_transport = "chalk_worker.broker.sentinel:SentinelTransport"
        transport_options["priority_steps"] = [0]
        transport_options = {**transport_options, **broker_sentinels.kombu_options()}
        broker_url = broker_sentinels.kombu_url()
    if broker_is_store(settings, redis_url):
        # Messages are taken into held lists beside the job records they belong to.
        transport_options["chalk_queue"] = settings.queue
        transport_options["chalk_lease_ms"] = int(settings.lease_s * 1000)
    celery.conf.update(
        broker_url=broker_url,
        result_backend=backend_url,
        result_backend_transport_options=backend_options,
        task_ignore_result=True,
        accept_content=["json"],
        result_accept_content=["json"],
        task_serializer="json",
        result_serializer="json",
        event_serializer="json",
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_transport_options=transport_options,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        task_default_queue=settings.queue,
        task_queues=[task_queue(settings.queue)],
        worker_send_task_events=True,
        task_send_sent_event=True,
        worker_hijack_root_logger=True,
    )
    return celery


CHALK_TRANSPORT_OPTIONS = ("chalk_queue", "chalk_lease_ms", "chalk_sentinels")
"""Transport options only Chalk's transports read."""


def make_flower_app(settings: ChalkSettings, redis_url: str) -> Celery:
    """The app ``chalk flower`` runs: the workers' app, on kombu's own transports.

    Flower reads the Broker page's queue lengths with a client it picks by the
    scheme of the app's broker URL, and knows ``redis``, ``rediss`` and
    ``sentinel``, not Chalk's transports (whose URL names their class). Flower
    neither takes nor sends ``chalk.score`` messages: it hears the workers'
    events, broadcasts to them and counts the queue, which kombu's transports
    do on the same Redis as Chalk's do. For ``rediss://``, the URL's ``ssl_*``
    parameters (``ssl_ca_certs``, ...) become ``broker_use_ssl``, which Flower's
    client reads instead of the URL's.
    """
    celery = make_app(settings, redis_url)
    broker_url = settings.broker_url or redis_url
    options = dict(celery.conf.broker_transport_options)
    for name in CHALK_TRANSPORT_OPTIONS:
        options.pop(name, None)
    through_sentinels = sentinel_url(broker_url)
    if through_sentinels is not None:
        # kombu's Sentinel transport moves along the sentinels of a ';' list itself.
        broker_url = through_sentinels.backend_url()
    elif is_unix(broker_url):
        broker_url = kombu_socket_url(broker_url)  # kombu's own transport, "redis+socket"
    celery.conf.update(
        broker_url=broker_url,
        broker_transport=None,  # kombu's, by the URL's scheme
        broker_transport_options=options,
    )
    if broker_url.startswith("rediss://"):
        celery.conf.broker_use_ssl = parse_url(broker_url).get("ssl") or None
    return celery


app = make_app(settings, redis_url)


def __getattr__(name: str) -> Celery:
    """``flower_app``, made when ``chalk flower`` asks for it (not in every worker)."""
    if name == "flower_app":
        return make_flower_app(settings, redis_url)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def publish(job_id: str, batch: str | None) -> str:
    """Send a job's message through a broker other than the store's Redis; its task id."""
    task_id = str(uuid.uuid4())
    app.send_task(
        TASK_NAME,
        args=[job_id],
        queue=settings.queue,
        task_id=task_id,
        kwargsrepr=repr({"batch": batch}) if batch else "{}",
    )
    return task_id


def report_lost(lost: Sequence[LostAttempt]) -> None:
    """Tell Flower that these attempts died with their worker (a ``task-failed`` event each,
    from the dead worker's node name), so that it does not show them running for ever."""
    by_node: dict[str, list[LostAttempt]] = {}
    for one in lost:
        if one.task_id:
            by_node.setdefault(one.node or delivery.REGISTRY.node, []).append(one)
    for node, attempts in by_node.items():
        try:
            with app.events.default_dispatcher(hostname=node) as events:
                for one in attempts:
                    again = f"; sent again as task {one.new_task_id}" if one.new_task_id else ""
                    events.send(
                        "task-failed",
                        uuid=one.task_id,
                        exception=f"WorkerLostError('{one.reason}: job {one.job_id}{again}')",
                        traceback="",
                    )
        except Exception as exc:  # events are for the dashboard: never worth failing the keeper
            log.warning("could not tell Flower about %d lost attempt(s): %s", len(attempts), exc)


resender = Resender(
    queue=settings.queue,
    publish=None if broker_is_store(settings, redis_url) else publish,
    report_lost=report_lost,
)


def runtime() -> WorkerRuntime:
    """This process's worker runtime."""
    # Threads and solo pools acknowledge in the process that scores: there a slot hands
    # its result to the runtime's finisher (chalk_worker.cluster.finisher) and goes on.
    in_background = background.ACKS.enabled and not delivery.NOTE_RECEIPTS
    return worker_runtime(settings, redis_url, resender, store_in_background=in_background)


def _score(task: _BoundTask, *args: object, **kwargs: object) -> str:
    """``chalk.score(job_id)``: score the job with that id (anything else is logged, dropped).

    Returns what happened (Flower shows it as the task's result, e.g. ``succeeded,
    score 1.0``); raises ``JobFailedError`` for a job whose stored result is ``failed``.
    """
    outcome = MessageOutcome.ERROR
    with metrics.handling_message():
        try:
            handled = runtime().handle(
                args,
                kwargs,
                node=str(task.request.hostname or "worker"),
                task_id=str(task.request.id or ""),
            )
            outcome = handled.outcome
            return str(handled)
        except JobFailedError:
            outcome = MessageOutcome.FAILED
            raise
        finally:
            metrics.message_handled(outcome)


score = app.task(
    name=TASK_NAME,
    bind=True,
    ignore_result=True,
    acks_late=True,
    shared=False,
    throws=(JobFailedError,),  # logged in a line, not as a traceback: the job's own failure
)(_score)


def _start_runtime(**_: object) -> None:
    # Start the lease keeper as soon as the process can take jobs, not at its first job:
    # an idle worker must also re-enqueue the jobs of a dead one.
    runtime()


def _note_pool(instance: object = None, **_: object) -> None:
    # A pool that starts each job as soon as it takes its message lets the start note
    # the message's receipt (delivery.NOTE_RECEIPTS); prefork holds messages first.
    pool = getattr(instance, "pool_cls", None)
    name = pool if isinstance(pool, str) else getattr(pool, "__module__", "")
    delivery.NOTE_RECEIPTS = not name.endswith(("thread", "threads", "solo"))


TASK_LINE_LOGGERS = ("celery.worker.strategy", "celery.app.trace")
"""Celery's loggers of a task's ``received`` and ``succeeded`` lines."""


def _quiet_task_lines(**_: object) -> None:
    # Celery reads these levels once, as it builds each task's strategy and tracer,
    # which happens after this (the consumer has not started yet).
    if not ChalkSettings().worker_log_tasks:
        for name in TASK_LINE_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)


def _send_in_background(**_: object) -> None:
    # A worker sends its events and acknowledgements from threads of their own
    # (chalk_worker.broker.background), and writes and reads JSON with orjson where
    # that reads back the same (chalk_worker.broker.fastjson).
    background.enable()
    fastjson.install()


def _send_last_events(**_: object) -> None:
    # The last results, acknowledgements and events (the worker going offline) go out.
    finisher = runtime().finisher
    if finisher is not None:
        finisher.flush(timeout=5.0)
    background.ACKS.flush(timeout=5.0)
    background.EVENTS.flush(timeout=5.0)


def _begin_shutdown(**_: object) -> None:
    # Told to stop: a grace period (CHALK_SHUTDOWN_GRACE_S), then at once; and a second
    # SIGTERM or Ctrl+C stops the worker at once (chalk_worker.cluster.shutdown).
    shutdown.begin(settings.shutdown_grace_s, _stop_now)


def _stop_now(reason: str) -> None:
    # Stops the jobs running here (their scripts killed) before the process ends.
    log.warning("chalk worker stops now (%s)", reason)
    made = worker_runtime_if_made()
    if made is not None:
        stopped = made.stop_all(timeout=5.0)
        unstored = made.finisher.unstored() if made.finisher is not None else 0
        log.warning(
            "%d running job(s) stopped and %d result(s) not stored: other workers score "
            "them once their leases lapse (CHALK_LEASE_S)",
            stopped,
            unstored,
        )


def _probe_sandbox(**_: object) -> None:
    # Before any job: the judges' and the LLM client's hooks count into the metrics (a
    # prefork child inherits them); refuse to start if CHALK_SANDBOX_REQUIRE names a
    # missing layer.
    metrics.install()
    try:
        detect_layers(settings.sandbox_tune_cgroups).require(settings.sandbox_require)
    except ConfigurationError as exc:
        log.critical("chalk worker refuses to start: %s", exc)
        raise SystemExit(2) from exc


def _announce_sandbox(**_: object) -> None:
    # Once logging is set up: one line per sandbox layer, on or off, in the worker's log.
    announce(detect_layers(settings.sandbox_tune_cgroups))


def _wait_for_store(sender: object = None, **_: object) -> None:
    # Once logging is set up, before consuming: a worker started before Redis waits for it.
    if sender:
        delivery.REGISTRY.node = str(sender)  # named in its consumers' ids
    presence.wait_for_redis(redis_url)


def _publish_presence(sender: _WorkerNode | None = None, **_: object) -> None:
    # For `chalk health`: this worker, its pool and its sandbox layers; and its metrics.
    pool = type(sender.pool).__module__.rsplit(".", 1)[-1] if sender is not None else "?"
    served = metrics.serve(settings.metrics_port)
    presence.start_presence(
        settings,
        redis_url,
        node=str(getattr(sender, "hostname", None) or "worker"),
        pool={"thread": "threads"}.get(pool, pool),
        concurrency=int(getattr(sender.pool, "limit", 0) or 0) if sender is not None else 0,
        metrics_port=settings.metrics_port if served else None,
        held=(lambda: runtime().held()) if pool in ("thread", "solo") else None,
    )


def _forget_child(pid: int | None = None, **_: object) -> None:
    metrics.process_exited(pid or 0)


worker_init.connect(_send_in_background, weak=False)
worker_init.connect(_probe_sandbox, weak=False)
celeryd_after_setup.connect(_note_pool, weak=False)
celeryd_after_setup.connect(_quiet_task_lines, weak=False)
# A worker waiting for a full Redis to take a message gives up when told to stop.
worker_shutting_down.connect(_begin_shutdown, weak=False)
celeryd_after_setup.connect(_wait_for_store, weak=False)
worker_ready.connect(_publish_presence, weak=False)
worker_shutdown.connect(lambda **_: presence.stop_presence(), weak=False)
worker_shutdown.connect(_send_last_events, weak=False)
worker_process_shutdown.connect(_forget_child, weak=False)
worker_ready.connect(_announce_sandbox, weak=False)
worker_ready.connect(_start_runtime, weak=False)
worker_process_init.connect(_start_runtime, weak=False)
