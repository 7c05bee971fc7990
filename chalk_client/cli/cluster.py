"""The cluster commands of ``chalk``: ``worker``, ``flower``, ``status``, ``score`` on a cluster.

``chalk worker`` and ``chalk flower`` become Celery's own commands for the app
``chalk_worker.app`` (named as a string: the client never imports the worker),
so every Celery and Flower flag passes through.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence

from chalk_client.cli.celery_args import (
    ROOT_NOTE,
    WORKER_PREFACE,
    flower_args,
    flower_help,
    wants_help,
)
from chalk_client.cli.ops import eta_line
from chalk_client.cli.processes import option_value, supervise, take_processes
from chalk_client.cli.progress import ResultSink
from chalk_client.cli.rescore import clear_results
from chalk_client.client import ChalkClient
from chalk_client.cluster.connection import connect, redacted
from chalk_client.cluster.lanes import shares, waiting_lanes
from chalk_client.cores import PROCESSES_ENV, usable_cores
from chalk_client.extras import require_worker
from chalk_client.jobs import DEFAULT_PRIORITY, JobStatus, Priority, ScoringJob
from chalk_client.settings import ChalkSettings
from chalk_client.summary import summarize_jobs
from chalk_client.usage import TokenUsage
from chalk_client.wording import grader_error_message
from chalk_client.workers import WorkerWatch

CELERY_APP = "chalk_worker.app"
FLOWER_APP = "chalk_worker.app:flower_app"
"""The workers' app on kombu's own transports, whose broker Flower's Broker page can read."""
WORKER_DEFAULTS: dict[tuple[str, ...], list[str]] = {
    ("-P", "--pool"): ["--pool", "threads"],
    ("-l", "--loglevel"): ["--loglevel", "INFO"],
    ("--without-mingle",): ["--without-mingle"],
    ("--without-gossip",): ["--without-gossip"],
}
"""Flags ``chalk worker`` adds unless given: the threads pool, a readable log, a fast start."""
THREADS_CONCURRENCY = 64
"""Jobs one threads-pool worker process holds at once, unless ``--concurrency`` is given."""
FLOWER_DEFAULTS: dict[str, str] = {
    "tasks_columns": "name,args,state,result,kwargs,worker,runtime,received",
    "purge_offline_workers": "600",
}
"""Flower options ``chalk flower`` sets unless given (as a flag or ``FLOWER_*`` variable):
the task list shows each task's job id (args), batch (kwargs) and outcome (result), and
workers gone for 10 minutes (scaled down, replaced) leave the dashboard."""
RECENT = 5


def _given(flags: tuple[str, ...], args: Sequence[str]) -> bool:
    return any(arg == flag or arg.startswith(flag + "=") for arg in args for flag in flags)


def _need_cluster(command: str) -> bool:
    """Whether ``CHALK_REDIS_URL`` is set (else say so); ``ConfigurationError`` if malformed."""
    url = ChalkSettings().redis_url
    if url:
        connect(url).close()  # parses the URL (connecting is left to the command)
        return True
    print(
        f"chalk {command}: set CHALK_REDIS_URL to the cluster's Redis, e.g. "
        "CHALK_REDIS_URL=redis://127.0.0.1:6379/0",
        file=sys.stderr,
    )
    return False


def worker_argv(args: Sequence[str]) -> list[str]:
    """The Celery command ``chalk worker ARGS`` becomes."""
    defaults = [
        flag
        for names, flags in WORKER_DEFAULTS.items()
        if not _given(names, args)
        for flag in flags
    ]
    if not _given(("-P", "--pool", "-c", "--concurrency"), args):
        # 64 jobs on one event loop suits the threads pool; another pool keeps Celery's default.
        defaults += ["--concurrency", str(THREADS_CONCURRENCY)]
    return [sys.executable, "-m", "celery", "-A", CELERY_APP, "worker", *defaults, *args]


def run_worker(args: Sequence[str]) -> int:
    """Replace this process by a Celery worker for the cluster (``kill`` reaches it directly),
    or, with more than one process (``--processes``, by default one per core with the
    threads pool), start them and stay as their parent (``chalk_client.cli.processes``).

    ``--help`` says what Chalk adds, then shows Celery's help; it needs no cluster.
    """
    require_worker("chalk worker")
    if wants_help(args):
        print(WORKER_PREFACE, flush=True)
        argv = [sys.executable, "-m", "celery", "-A", CELERY_APP, "worker", "--help"]
        os.execv(argv[0], argv)
    if not _need_cluster("worker"):
        return 2
    pool, _ = option_value(list(args), ("-P", "--pool"))
    count, args = take_processes(args, pool)
    if os.geteuid() == 0:
        print(ROOT_NOTE, file=sys.stderr, flush=True)
    argv = worker_argv(args)
    given, _ = option_value(argv, ("-c", "--concurrency"))
    concurrency = int(given) if given and given.isdigit() else usable_cores()
    count = max(1, min(count, concurrency))
    if count == 1:
        os.environ[PROCESSES_ENV] = "1"  # the worker sizes itself by every core
        os.execv(argv[0], argv)
    return supervise(argv, count, concurrency)


def run_flower(args: Sequence[str]) -> int:
    """Replace this process by Flower, watching the cluster's workers.

    ``--help`` lists what Chalk adds and Flower's options; it needs no cluster.
    """
    require_worker("chalk flower")
    if wants_help(args):
        print(flower_help(flower_defaults(args)))
        return 0
    given = flower_args(args)
    if not _need_cluster("flower"):
        return 2
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        FLOWER_APP,
        "flower",
        *flower_defaults(given),
        *given,
    ]
    os.execv(argv[0], argv)


def flower_defaults(args: Sequence[str]) -> list[str]:
    """The ``FLOWER_DEFAULTS`` flags that neither ``args`` nor the environment set."""
    return [
        f"--{name}={value}"
        for name, value in FLOWER_DEFAULTS.items()
        if not _given((f"--{name}",), args) and f"FLOWER_{name.upper()}" not in os.environ
    ]


def _job_status(client: ChalkClient, job_id: str) -> int:
    handle = client.job(job_id)
    result = handle.get()
    if result is None:
        state = client.store.states([job_id])[0]
        print(f"job {job_id}: {handle.status()}, {state.attempts} attempt(s) so far")
        return 0
    print(f"job {job_id}: {result.status}")
    if result.status is JobStatus.SUCCEEDED:
        cause = "" if result.cause is None else f" ({result.cause})"
        print(f"  score: {result.score}{cause}")
        if result.grader_error:
            print(
                f"  GRADER ERROR: {grader_error_message(result)} (the scoring script failed, "
                "not the student; the score is 0 as the reference says)"
            )
        print(f"  error: {result.error}")
    print(f"  attempts: {result.attempts}, worker: {result.worker}")
    print(f"  timings: {result.timings}")
    tokens = TokenUsage.of_result(result)
    if tokens.total:
        print(f"  LLM: {tokens.describe(tokens.cost(client.settings))}")
    return 0


def _waiting_lines(client: ChalkClient, batch_id: str | None = None) -> list[str]:
    """What waits, by priority and batch, and the share of the workers each batch gets now."""
    lanes = waiting_lanes(client.store.redis, client.settings.queue)
    share = shares(lanes)
    lines = []
    for lane in lanes:
        if batch_id is not None and lane.batch != batch_id:
            continue
        name = f"batch {lane.batch}" if lane.batch else "jobs sent one at a time"
        now = share[(lane.priority, lane.batch)]
        said = f"{now:.0%} of the workers now" if now else "waits for higher priorities"
        lines.append(f"  {lane.priority:<6} {name}: {lane.waiting} waiting, {said}")
    if batch_id is None:
        return ["  waiting, by priority (high first; batches of one priority take turns):"] + (
            ["  " + line for line in lines] or ["    nothing"]
        )
    return lines


def _overview(client: ChalkClient) -> int:
    settings = client.settings
    print(f"cluster at {redacted(client.redis_url)}")
    if not settings.broker_url or settings.broker_url == client.redis_url:
        print(f"  queued messages ({settings.queue}): {client.store.queue_length()}")
        print("\n".join(_waiting_lines(client)))
    print(f"  running jobs: {client.store.running_count()}")
    batches = client.store.recent_batches(RECENT)
    if not batches:
        print("  no batches yet")
    for batch_id in batches:
        ids = client.store.batch_ids(batch_id)
        if ids:  # else expired
            print(summarize_jobs(client.store, ids, batch_id).render())
            callback = client.batch_callback(batch_id)
            if callback is not None:
                print(f"  {callback.describe()}")
    return 0


def run_status(target: str | None) -> int:
    """``chalk status [JOB_OR_BATCH]``: a job's state, a batch's counts, or the cluster's."""
    if not _need_cluster("status"):
        return 2
    with ChalkClient() as client:
        if target is None:
            return _overview(client)
        ids = client.store.batch_ids(target)
        if ids:
            summary = summarize_jobs(client.store, ids, target)
            callback = client.batch_callback(target)
            shown = None if callback is None else f"  {callback.describe()}"
            lines = [summary.render(), eta_line(client, summary), shown]
            print("\n".join(filter(None, [*lines, *_waiting_lines(client, target)])))
            return 0
        return _job_status(client, target)


def score_on_cluster(
    jobs: Iterable[ScoringJob],
    sink: ResultSink,
    *,
    rescore: bool = False,
    priority: Priority = DEFAULT_PRIORITY,
) -> None:
    """Submit ``jobs`` to the cluster as one batch; write each result to ``sink`` as it finishes.

    Jobs whose earlier result ``failed`` are scored again, as on the embedded queue;
    with ``rescore``, so are those that succeeded (their results are cleared first).
    While no live worker takes the queue, the user is told so, at once and then
    regularly.
    """
    todo = list(jobs)
    if not todo:
        return
    with ChalkClient() as client:
        if rescore:
            clear_results(client, [job.id for job in todo if job.id is not None])
        batch = client.submit_batch(todo, retry_failed=True, priority=priority)
        sink.bar.say(
            f"chalk score: {batch.total} jobs sent to {redacted(client.redis_url)} as batch "
            f"{batch.id} (see `chalk status {batch.id}`)"
        )
        watch = WorkerWatch(
            client.workers,
            client.redis_url,
            client.settings.queue,
            sink.bar.say,
            lambda: batch.total - batch.done,
        )
        with watch:
            for result in batch:
                sink.write(result)
