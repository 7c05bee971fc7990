"""The worker's Prometheus metrics: every definition here, recorded by one-line hooks.

The modules that know what happened call the functions below (``job_scored``
from the consumer, ``judge_timer`` from the judge registry, ``sandbox_run`` from
the executable judge, ``llm_request``/``llm_response`` from the LLM pool,
``rubric_verdicts`` from the rubric judge). ``serve`` exposes them over HTTP
when ``CHALK_METRICS_PORT`` is set; with no port nothing is served, and
recording costs a few counter increments.

One process, one set of counters: with Celery's threads pool (the default) the
worker is one process and its ``/metrics`` holds everything. With the prefork
pool each child counts on its own; set ``PROMETHEUS_MULTIPROC_DIR`` to an empty
folder (a fresh one per worker start) and the parent's ``/metrics`` adds up
every child's (``prometheus_client``'s multiprocess mode).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client import multiprocess as prometheus_multiprocess

from chalk_client.jobs import JobResult
from chalk_worker.sandbox.process import ProcessOutcome

log = logging.getLogger(__name__)

MULTIPROCESS_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
"""Set to a folder, children of a prefork worker count into files there."""

JOB_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
"""Seconds: a regex judge takes milliseconds, a scoring script up to its wall-clock limit."""

JOBS = Counter("chalk_jobs", "Jobs this worker scored, by the status of their result.", ["status"])
MESSAGES = Counter(
    "chalk_messages",
    "chalk.score messages handled, by outcome: succeeded or failed (scored here), duplicate "
    "(already had a result), busy (another worker holds it), missing (no record), "
    "malformed, error (an exception in the worker).",
    ["outcome"],
)
MESSAGES_IN_PROGRESS = Gauge(
    "chalk_messages_in_progress",
    "chalk.score messages being handled now (jobs being scored, mostly).",
    multiprocess_mode="livesum",
)
JOB_RETRIES = Counter(
    "chalk_job_retries",
    "Jobs scored on a later attempt: their earlier worker died or lost the job's lease.",
)
JOB_SECONDS = Histogram(
    "chalk_job_duration_seconds",
    "Time to score one job, from collecting its submission to its last step.",
    buckets=JOB_BUCKETS,
)
JUDGE_SECONDS = Histogram(
    "chalk_judge_duration_seconds",
    "Time one judge took, by judge type (all and any include the judges they combine).",
    ["judge"],
    buckets=JOB_BUCKETS,
)
SANDBOX_RUNS = Counter(
    "chalk_sandbox_runs",
    "Scoring scripts run in the sandbox, by outcome: exited (with any status), timeout, "
    "out_of_memory, signal (killed by a signal), not_started.",
    ["outcome"],
)
SANDBOX_STARTS = Counter(
    "chalk_sandbox_starts",
    "Scoring scripts by how they started: warm (a {python} script forked from an interpreter "
    "already started), forked (executed from a fork server), direct (a sandbox of its own).",
    ["how"],
)
SANDBOX_TIMEOUTS = Counter(
    "chalk_sandbox_timeouts", "Scoring scripts killed at their wall-clock limit."
)
SANDBOX_KILLS = Counter(
    "chalk_sandbox_kills",
    "Processes the sandbox killed, by reason: timeout (a script at its wall-clock limit), "
    "memory (the memory cgroup's OOM killer), leftover (a process still alive after its "
    "script ended, counted one by one).",
    ["reason"],
)
LLM_REQUESTS = Counter(
    "chalk_llm_requests", "HTTP requests sent to the LLM server, retries included."
)
LLM_RETRIES = Counter(
    "chalk_llm_retries", "HTTP requests to the LLM server that retried an earlier attempt."
)
LLM_RESPONSES = Counter(
    "chalk_llm_responses", "HTTP responses of the LLM server, by status code.", ["code"]
)
LLM_TOKENS = Counter(
    "chalk_llm_tokens", "Tokens the LLM server counted, by kind and model.", ["kind", "model"]
)
RUBRIC_VERDICTS = Counter(
    "chalk_rubric_verdicts",
    "Rubric criteria graded, by source: llm (asked) or cache (a remembered verdict).",
    ["source"],
)


class GradedVerdict(Protocol):
    """What ``rubric_verdicts`` reads of a verdict (``chalk_worker.verdicts.Verdict``)."""

    @property
    def cached(self) -> bool:
        """Whether it was remembered rather than asked."""

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens it took."""

    @property
    def completion_tokens(self) -> int:
        """Completion tokens it took."""


def job_scored(result: JobResult) -> None:
    """Count a job this worker scored: its status, its attempt, its duration."""
    JOBS.labels(status=str(result.status)).inc()
    if result.attempts > 1:
        JOB_RETRIES.inc()
    total = result.timings.get("total")
    if total is not None:
        JOB_SECONDS.observe(total)


def message_handled(outcome: str) -> None:
    """Count a ``chalk.score`` message by what became of it."""
    MESSAGES.labels(outcome=outcome).inc()


@contextmanager
def handling_message() -> Iterator[None]:
    """Count a message as in progress while the block runs."""
    MESSAGES_IN_PROGRESS.inc()
    try:
        yield
    finally:
        MESSAGES_IN_PROGRESS.dec()


@contextmanager
def judge_timer(judge_type: str) -> Iterator[None]:
    """Time one judge of type ``judge_type`` (also when it raises)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        JUDGE_SECONDS.labels(judge=judge_type).observe(time.perf_counter() - started)


def sandbox_run(outcome: ProcessOutcome) -> None:
    """Count one sandboxed run by how it ended, and the processes killed for it."""
    if outcome.start_error is not None:
        kind = "not_started"
    elif outcome.timed_out:
        kind = "timeout"
        SANDBOX_TIMEOUTS.inc()
        SANDBOX_KILLS.labels(reason="timeout").inc()
    elif outcome.memory_exceeded:
        kind = "out_of_memory"
        SANDBOX_KILLS.labels(reason="memory").inc()
    elif outcome.returncode is not None and (outcome.returncode < 0 or outcome.maybe_signal):
        kind = "signal"  # under bubblewrap, also a script that exits with 129 to 192
    else:
        kind = "exited"
    SANDBOX_RUNS.labels(outcome=kind).inc()
    SANDBOX_STARTS.labels(how=outcome.started).inc()
    if outcome.leftovers_killed:
        SANDBOX_KILLS.labels(reason="leftover").inc(outcome.leftovers_killed)


def llm_request(request: Any) -> None:
    """Count one HTTP request to the LLM server (an ``httpx`` request), and whether it retries.

    The ``openai`` client numbers its attempts in the ``x-stainless-retry-count`` header.
    """
    LLM_REQUESTS.inc()
    try:
        retry = int(request.headers.get("x-stainless-retry-count", "0"))
    except (AttributeError, ValueError):
        retry = 0
    if retry > 0:
        LLM_RETRIES.inc()


def llm_response(status_code: int) -> None:
    """Count one HTTP response of the LLM server by its status code."""
    LLM_RESPONSES.labels(code=str(status_code)).inc()


def rubric_verdicts(model: str, verdicts: Iterable[GradedVerdict]) -> None:
    """Count a rubric judge's verdicts (asked or remembered) and the tokens they took."""
    prompt = completion = 0
    for verdict in verdicts:
        RUBRIC_VERDICTS.labels(source="cache" if verdict.cached else "llm").inc()
        prompt += verdict.prompt_tokens
        completion += verdict.completion_tokens
    if prompt:
        LLM_TOKENS.labels(kind="prompt", model=model).inc(prompt)
    if completion:
        LLM_TOKENS.labels(kind="completion", model=model).inc(completion)


def serve(port: int | None, address: str = "0.0.0.0") -> bool:
    """Serve ``/metrics`` on ``port`` in a background thread; ``False`` when ``port`` is unset.

    In multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``), what is served adds up the
    counts of every process of the worker.
    """
    if not port:
        return False
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
        prometheus_multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
