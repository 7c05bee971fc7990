"""The worker's Prometheus metrics: every definition here, recorded by one-line hooks.

The consumer calls ``job_scored``, ``message_handled`` and ``handling_message``
itself; the judges and the LLM client know nothing of this module: they call
the hooks of ``chalk_worker.judges.hooks`` and ``chalk_worker.llm.hooks``, which
``install`` (done by the worker at start) points at ``judge_timer``,
``sandbox_run``, ``rubric_verdicts``, ``llm_request`` and ``llm_response``
below. ``serve`` exposes them over HTTP when ``CHALK_METRICS_PORT`` is set;
with no port nothing is served, and recording costs a few counter increments.
The metrics are made on first use; ``score_job`` and ``chalk score`` install
nothing, record nothing and never import ``prometheus_client``.

One process, one set of counters: with Celery's threads pool (the default) the
worker is one process and its ``/metrics`` holds everything. With the prefork
pool each child counts on its own; set ``PROMETHEUS_MULTIPROC_DIR`` to an empty
folder (a fresh one per worker start) and the parent's ``/metrics`` adds up
every child's (``prometheus_client``'s multiprocess mode).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from enum import StrEnum
from typing import TYPE_CHECKING, Literal

from chalk_client.jobs import JobResult

if TYPE_CHECKING:
    import httpx

    from chalk_client.judge_specs import JudgeType
    from chalk_worker.judges.hooks import GradedVerdict
    from chalk_worker.sandbox.process import ProcessOutcome

log = logging.getLogger(__name__)

MULTIPROCESS_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
"""Set to a folder, children of a prefork worker count into files there."""

JOB_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
"""Seconds: a regex judge takes milliseconds, a scoring script up to its wall-clock limit."""


class MessageOutcome(StrEnum):
    """What became of one ``chalk.score`` message (a metrics label, and Flower's result)."""

    SUCCEEDED = "succeeded"
    """Scored here; the result is stored."""
    FAILED = "failed"
    """Scored here and stored ``failed`` (raised as ``JobFailedError`` for Flower)."""
    DUPLICATE = "duplicate"
    """The job already had a result: the message was dropped."""
    BUSY = "busy"
    """Another worker holds the job's lease: the message was dropped."""
    MISSING = "missing"
    """No record of the job (never submitted, or expired): the message was dropped."""
    MALFORMED = "malformed"
    """The message's arguments are not one job id: it was dropped."""
    CANCELLED = "cancelled"
    """The job got a result while it ran here (its batch was cancelled): it was stopped."""
    ERROR = "error"
    """Handling it raised (a bug, or Redis gone for good): Celery logs it."""


SandboxEnding = Literal["exited", "timeout", "out_of_memory", "signal", "not_started"]
"""How a sandboxed run ended (the ``outcome`` label of ``chalk_sandbox_runs``)."""


class _Metrics:
    """Every metric of the worker (made on first use: ``prometheus_client`` is slow to import)."""

    def __init__(self) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.jobs = Counter(
            "chalk_jobs", "Jobs this worker scored, by the status of their result.", ["status"]
        )
        self.jobs_started = Counter(
            "chalk_jobs_started",
            "Jobs this worker started, by priority (high, normal, low).",
            ["priority"],
        )
        self.jobs_waiting = Gauge(
            "chalk_jobs_waiting",
            "Jobs waiting in the cluster's queue, by priority, as this worker last looked.",
            ["priority"],
            multiprocess_mode="mostrecent",
        )
        self.messages = Counter(
            "chalk_messages",
            "chalk.score messages handled, by outcome: succeeded or failed (scored here), "
            "duplicate (already had a result), busy (another worker holds it), missing (no "
            "record), malformed, error (an exception in the worker).",
            ["outcome"],
        )
        self.messages_in_progress = Gauge(
            "chalk_messages_in_progress",
            "chalk.score messages being handled now (jobs being scored, mostly).",
            multiprocess_mode="livesum",
        )
        self.job_retries = Counter(
            "chalk_job_retries",
            "Jobs scored on a later attempt: their earlier worker died or lost the job's lease.",
        )
        self.job_seconds = Histogram(
            "chalk_job_duration_seconds",
            "Time to score one job, from collecting its submission to its last step.",
            buckets=JOB_BUCKETS,
        )
        self.judge_seconds = Histogram(
            "chalk_judge_duration_seconds",
            "Time one judge took, by judge type (all and any include the judges they combine).",
            ["judge"],
            buckets=JOB_BUCKETS,
        )
        self.sandbox_runs = Counter(
            "chalk_sandbox_runs",
            "Scoring scripts run in the sandbox, by outcome: exited (with any status), timeout, "
            "out_of_memory, signal (killed by a signal), not_started.",
            ["outcome"],
        )
        self.sandbox_starts = Counter(
            "chalk_sandbox_starts",
            "Scoring scripts by how they started: warm (a {python} script forked from an "
            "interpreter already started), forked (executed from a fork server), direct (a "
            "sandbox of its own).",
            ["how"],
        )
        self.sandbox_timeouts = Counter(
            "chalk_sandbox_timeouts", "Scoring scripts killed at their wall-clock limit."
        )
        self.sandbox_kills = Counter(
            "chalk_sandbox_kills",
            "Processes the sandbox killed, by reason: timeout (a script at its wall-clock limit), "
            "memory (the memory cgroup's OOM killer), leftover (a process still alive after its "
            "script ended, counted one by one).",
            ["reason"],
        )
        self.llm_requests = Counter(
            "chalk_llm_requests", "HTTP requests sent to the LLM server, retries included."
        )
        self.llm_retries = Counter(
            "chalk_llm_retries", "HTTP requests to the LLM server that retried an earlier attempt."
        )
        self.llm_responses = Counter(
            "chalk_llm_responses", "HTTP responses of the LLM server, by status code.", ["code"]
        )
        self.llm_tokens = Counter(
            "chalk_llm_tokens",
            "Tokens the LLM server counted, by kind and model.",
            ["kind", "model"],
        )
        self.rubric_verdicts = Counter(
            "chalk_rubric_verdicts",
            "Rubric criteria graded, by source: llm (asked) or cache (a remembered verdict).",
            ["source"],
        )


_metrics: _Metrics | None = None
_lock = threading.Lock()


def _recorded() -> _Metrics | None:
    """The metrics, defined on first use."""
    global _metrics
    if _metrics is None:
        with _lock:
            if _metrics is None:
                _metrics = _Metrics()
    return _metrics


def job_scored(result: JobResult) -> None:
    """Count a job this worker scored: its status, its attempt, its duration."""
    m = _recorded()
    if m is None:
        return
    m.jobs.labels(status=str(result.status)).inc()
    if result.attempts > 1:
        m.job_retries.inc()
    total = result.timings.get("total")
    if total is not None:
        m.job_seconds.observe(total)


def job_started(priority: str) -> None:
    """Count a job this worker started, by its priority."""
    m = _recorded()
    if m is not None:
        m.jobs_started.labels(priority=priority).inc()


def jobs_waiting(counts: Mapping[str, int]) -> None:
    """Set how many jobs wait in the queue, per priority."""
    m = _recorded()
    if m is not None:
        for priority, count in counts.items():
            m.jobs_waiting.labels(priority=priority).set(count)


def message_handled(outcome: MessageOutcome) -> None:
    """Count a ``chalk.score`` message by what became of it."""
    m = _recorded()
    if m is None:
        return
    m.messages.labels(outcome=outcome.value).inc()


@contextmanager
def handling_message() -> Iterator[None]:
    """Count a message as in progress while the block runs."""
    m = _recorded()
    if m is None:
        yield
        return
    m.messages_in_progress.inc()
    try:
        yield
    finally:
        m.messages_in_progress.dec()


@contextmanager
def judge_timer(judge_type: JudgeType) -> Iterator[None]:
    """Time one judge of type ``judge_type`` (also when it raises)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        m = _recorded()
        if m is not None:
            m.judge_seconds.labels(judge=judge_type).observe(time.perf_counter() - started)


def sandbox_run(outcome: ProcessOutcome) -> None:
    """Count one sandboxed run by how it ended, and the processes killed for it."""
    m = _recorded()
    if m is None:
        return
    kind: SandboxEnding
    if outcome.start_error is not None:
        kind = "not_started"
    elif outcome.timed_out:
        kind = "timeout"
        m.sandbox_timeouts.inc()
        m.sandbox_kills.labels(reason="timeout").inc()
    elif outcome.memory_exceeded:
        kind = "out_of_memory"
        m.sandbox_kills.labels(reason="memory").inc()
    elif outcome.returncode is not None and (outcome.returncode < 0 or outcome.maybe_signal):
        kind = "signal"  # under bubblewrap, also a script that exits with 129 to 192
    else:
        kind = "exited"
    m.sandbox_runs.labels(outcome=kind).inc()
    m.sandbox_starts.labels(how=outcome.started).inc()
    if outcome.leftovers_killed:
        m.sandbox_kills.labels(reason="leftover").inc(outcome.leftovers_killed)


def llm_request(request: httpx.Request) -> None:
    """Count one HTTP request to the LLM server (an ``httpx`` request), and whether it retries.

    The ``openai`` client numbers its attempts in the ``x-stainless-retry-count`` header.
    """
    m = _recorded()
    if m is None:
        return
    m.llm_requests.inc()
    try:
        retry = int(request.headers.get("x-stainless-retry-count", "0"))
    except (AttributeError, ValueError):
        retry = 0
    if retry > 0:
        m.llm_retries.inc()


def llm_response(status_code: int) -> None:
    """Count one HTTP response of the LLM server by its status code."""
    m = _recorded()
    if m is None:
        return
    m.llm_responses.labels(code=str(status_code)).inc()


def rubric_verdicts(model: str, verdicts: Iterable[GradedVerdict]) -> None:
    """Count a rubric judge's verdicts (asked or remembered) and the tokens they took."""
    m = _recorded()
    if m is None:
        return
    prompt = completion = 0
    for verdict in verdicts:
        m.rubric_verdicts.labels(source="cache" if verdict.cached else "llm").inc()
        prompt += verdict.prompt_tokens
        completion += verdict.completion_tokens
    if prompt:
        m.llm_tokens.labels(kind="prompt", model=model).inc(prompt)
    if completion:
        m.llm_tokens.labels(kind="completion", model=model).inc(completion)


def install() -> None:
    """Point the judges' and the LLM client's hooks at this module's metrics."""
    from chalk_worker.judges.hooks import HOOKS as judges
    from chalk_worker.llm.hooks import HOOKS as llm

    judges.judge_timer = judge_timer
    judges.sandbox_run = sandbox_run
    judges.rubric_verdicts = rubric_verdicts
    llm.llm_request = llm_request
    llm.llm_response = llm_response


def serve(port: int | None, address: str = "0.0.0.0") -> bool:
    """Serve ``/metrics`` on ``port`` in a background thread; ``False`` when ``port`` is unset.

    In multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``), what is served adds up the
    counts of every process of the worker.
    """
    if not port:
        return False
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client import multiprocess as prometheus_multiprocess

    _recorded()  # every metric exists, at zero, from the first scrape
    registry: CollectorRegistry | None = None
    if os.environ.get(MULTIPROCESS_VARIABLE):
        registry = CollectorRegistry()
        prometheus_multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    try:
        if registry is None:
            start_http_server(port, addr=address)
        else:
            start_http_server(port, addr=address, registry=registry)
    except OSError as exc:
        log.error("cannot serve metrics on port %d (CHALK_METRICS_PORT): %s", port, exc)
        return False
    log.info("Prometheus metrics on http://%s:%d/metrics", address, port)
    return True


def process_exited(pid: int) -> None:
    """Forget a prefork child's live gauges (multiprocess mode only)."""
    if os.environ.get(MULTIPROCESS_VARIABLE):
        from prometheus_client import multiprocess as prometheus_multiprocess

        prometheus_multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
