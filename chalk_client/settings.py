"""Settings, read from ``CHALK_*`` variables; explicit arguments win.

Each concern is a small settings object of its own, each field documented
where it is defined: ``StoreSettings`` (Redis, the queue, how long things are
kept, leases), ``LLMSettings`` (the server rubric judges ask and how),
``SandboxSettings`` (what scoring scripts may run and see), ``LimitSettings``
(what one job may use), ``CallbackSettings`` (how workers send batch callbacks)
and ``RunSettings`` (the rest of a worker's or ``chalk score``'s process).
``ChalkSettings`` is all of them at once, under the same names:
``ChalkSettings().lease_s`` reads ``CHALK_LEASE_S``, and a function that needs
only the LLM settings takes an ``LLMSettings`` (a ``ChalkSettings`` is one;
``settings.llm`` is the LLM part alone).

Limits have a default and an operator maximum: a job may ask for other limits
(``ScoringJob.limits``) but never more than the maximum.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

MiB = 1024 * 1024


class Limits(BaseModel):
    """A job's requested limits; a field left ``None`` takes the worker's default."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    wall_s: float | None = Field(default=None, gt=0)
    """Wall-clock seconds per executable judge."""
    memory_mb: int | None = Field(default=None, gt=0)
    """Memory of a judge's whole process tree."""
    processes: int | None = Field(default=None, gt=0)
    """Processes a judge may have at once."""
    file_size_mb: int | None = Field(default=None, gt=0)
    """Largest file a judge may write."""
    unpack_bytes: int | None = Field(default=None, gt=0)
    """Decompressed bytes of the submission archive, headers included."""
    unpack_entries: int | None = Field(default=None, gt=0)
    """Files and folders in the submission."""
    unpack_depth: int | None = Field(default=None, gt=0)
    """Folder nesting of the submission."""


@dataclass(frozen=True)
class ResolvedLimits:
    """The limits in force for one job: defaults, the job's wishes, capped by the maxima."""

    wall_s: float
    memory_mb: int
    processes: int
    file_size_mb: int
    unpack_bytes: int
    unpack_entries: int
    unpack_depth: int
    output_bytes: int


def _split_list(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.replace("\n", ",").split(",") if part.strip()]
    return value


_CONFIG = SettingsConfigDict(env_prefix="CHALK_", extra="ignore", allow_inf_nan=False)
"""Every part's. Each setting is documented by the docstring under it, in this file (where
editors show it); pydantic's ``use_attribute_docstrings`` would read them again from the
source at every start (~20 ms of each ``chalk`` command and of ``import chalk_client``)."""


class StoreSettings(BaseSettings):
    """Where the cluster is and how long it keeps things (``CHALK_REDIS_URL``, TTLs, leases)."""

    model_config = _CONFIG

    redis_url: str | None = None
    """The cluster's Redis; unset means the embedded, in-process queue."""
    broker_url: str | None = None
    """Optional separate Celery broker (e.g. ``amqp://``); results stay in Redis."""
    queue: str = Field(default="chalk", min_length=1)
    """The Celery queue the cluster's jobs go through."""
    result_ttl_s: int = Field(default=7 * 86400, gt=0)
    """How long results (and batch indexes) are kept in Redis: 7 days."""
    job_ttl_s: int = Field(default=7 * 86400, gt=0)
    """How long job records are kept in Redis: 7 days (a job queued longer is dropped)."""
    blob_ttl_s: int = Field(default=7 * 86400, gt=0)
    """How long a submission archive is kept after its last submission: 7 days."""
    lease_s: float = Field(default=20.0, gt=0)
    """A running job's lease; a worker that stops renewing it loses the job to another.

    A worker process's hold on the messages it took from the queue lapses the same
    way: a lease after its last renewal, another worker gives them back to the queue.
    """
    keep_jobs: bool = False
    """Keep a job's record (its transcript, its archive) after it succeeded, as long as
    ``CHALK_JOB_TTL_S``; by default a job that succeeded leaves only its result in Redis."""
    reconcile_s: float = Field(default=60.0, gt=0)
    """Grace before the reconciler sends again a job that is neither finished, running,
    taken by a live worker nor waiting in the queue (its message was lost)."""
    shutdown_grace_s: float = Field(default=30.0, gt=0)
    """How long a worker told to stop (SIGTERM, Ctrl+C) waits for a Redis it cannot reach.
    It finishes the jobs it runs while Redis answers; once Redis was silent this long
    (counted from the stop, or from its last contact if later), jobs still running are stopped and
    results not stored dropped, all left to other workers (sent again once their leases
    lapse). A second SIGTERM or Ctrl+C stops it at once, the same way."""
    worker_processes: int | None = Field(default=None, ge=1)
    """How many worker processes ``chalk worker`` starts (as ``--processes``); unset: one
    per usable core with the threads pool, one with another pool. Each process is told
    the count and sizes what it sizes by cores (scripts at once, regex helpers) by its
    share of them."""
    worker_log_tasks: bool = False
    """Whether a worker logs Celery's two lines a task (``Task chalk.score[...] received`` and
    ``... succeeded in``). Off by default: at a thousand trivial jobs a second they are a
    tenth of a worker's CPU. Flower, ``chalk status`` and the job's own record show each job."""
    visibility_timeout_s: float = Field(default=12 * 3600.0, gt=0)
    """Redis broker: when a message left in kombu's own ``unacked`` hash (other queues,
    workers of older versions) is delivered again; Chalk's workers hold theirs by lease."""
    redis_wait_replicas: int = Field(default=0, ge=0)
    """Replicas that must have a submit, and a result, before either counts as done
    (Redis ``WAIT``); 0 waits for none. See ``chalk_client.cluster.replicas``."""
    redis_wait_timeout_s: float = Field(default=2.0, gt=0)
    """Longest wait for those replicas; a submit still short of them then raises."""

    @property
    def reconcile_ms(self) -> int:
        """``reconcile_s`` in milliseconds, for the scripts (Redis's clock is in ms)."""
        return max(int(self.reconcile_s * 1000), 1)


class LLMSettings(BaseSettings):
    """The OpenAI-compatible server rubric judges ask, and how they ask it."""

    model_config = _CONFIG

    rubric_model: str = "gpt-4o-mini"
    """The model a rubric judge asks when the judge names none."""
    llm_base_url: str | None = None
    """The OpenAI-compatible server rubric judges ask; ``None`` reads ``OPENAI_BASE_URL``."""
    llm_api_key: SecretStr | None = None
    """Its API key; ``None`` reads ``OPENAI_API_KEY`` (optional when a base URL is set)."""
    llm_max_in_flight: int = Field(default=64, ge=1)
    """LLM requests one worker process has in flight at once, all jobs together."""
    llm_max_retries: int = Field(default=4, ge=0)
    """Retries of one request on 429, 5xx, timeouts and connection errors (backoff, jitter)."""
    llm_request_timeout_s: float = Field(default=60.0, gt=0)
    """Seconds one attempt of one request may take."""
    llm_requests_per_minute: int = Field(default=0, ge=0)
    """Requests one worker process may start per minute; 0 means no limit."""
    rubric_deadline_s: float = Field(default=300.0, gt=0)
    """Seconds a job may spend in rubric grading, all its rubric judges and retries together."""
    rubric_verdict_attempts: int = Field(default=2, ge=1)
    """Times a criterion is asked before a reply that is neither YES nor NO is reported."""
    rubric_no_verdict: Literal["fail", "unscored"] = "fail"
    """After those attempts: ``fail`` the job, or record the criterion ``unscored``."""
    rubric_temperature: float | None = 0.0
    """Sampling temperature of verdicts; ``none`` sends none (for models that refuse one)."""
    rubric_cache_entries: int = Field(default=10_000, ge=0)
    """Verdicts remembered per worker process, so re-grading costs no call; 0 disables."""
    rubric_cache_ttl_s: int = Field(default=7 * 86400, ge=0)
    """With a cluster: how long Redis keeps a verdict for every worker (7 days); 0 disables."""
    llm_cluster_requests_per_minute: int = Field(default=0, ge=0)
    """LLM requests all workers together may send per minute (paced in Redis); 0: no limit."""
    llm_prompt_price_per_mtok: float | None = Field(default=None, ge=0)
    """Price of 1M prompt tokens (USD), for cost estimates; ``None``: no estimate."""
    llm_completion_price_per_mtok: float | None = Field(default=None, ge=0)
    """Price of 1M completion tokens (USD), for cost estimates; ``None``: no estimate."""

    @field_validator("rubric_temperature", mode="before")
    @classmethod
    def _no_temperature(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in ("", "none", "null"):
            return None
        return value


class SandboxSettings(BaseSettings):
    """What scoring scripts may run and see, and the machine's sandbox slots."""

    model_config = _CONFIG

    allowed_commands: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Command prefixes executable judges may run (comma-separated or a JSON list).

    Empty: any command runs (sandboxed). A prefix is compared on the command as
    written, before placeholders are filled, e.g. ``{python} -m tasks.``. Set it on the
    workers wherever not every client is trusted: whoever may submit jobs (a Redis user
    of ``chalk acl``'s client role too) may name any command, and Redis's ACLs cannot
    look inside a job to refuse it.
    """
    sandbox_require: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Sandbox layers the worker refuses to run without (comma-separated, or ``all``)."""
    sandbox_paths: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Extra host folders scripts may read (read-only, same path), e.g. grading data."""
    sandbox_named_paths: bool = True
    """Show scripts, read-only, the absolute host paths a job's command and ``cwd`` name."""
    sandbox_uid_base: int = Field(default=61000, ge=1000)
    """First uid of the sandbox slots; slot ``n`` runs as uid ``base + n``."""
    sandbox_slots: int = Field(default=256, ge=1)
    """Sandbox uids reserved on a machine: the most scripts running at once on it."""
    sandbox_lock_dir: str = "/run/chalk-sandbox"
    """Where slots are claimed (one lock file per slot, machine-wide)."""
    sandbox_tune_cgroups: bool = True
    """Let a root worker turn on ``favordynmods`` on the cgroup2 mount (cheap cgroup moves)."""
    warm_python: bool = True
    """Run ``{python}`` scoring scripts warm: forked from an interpreter already started in
    the sandbox, instead of starting a new one (false: every script starts cold)."""

    _split = field_validator("allowed_commands", "sandbox_require", "sandbox_paths", mode="before")(
        _split_list
    )


class LimitSettings(BaseSettings):
    """What one job may use: defaults, and the operator's maxima a job cannot pass."""

    model_config = _CONFIG

    wall_s: float = 600.0
    """Wall-clock seconds an executable judge runs by default (10 minutes)."""
    max_wall_s: float = 6 * 3600.0
    """The most a job may ask for (``Limits.wall_s``): 6 hours."""
    memory_mb: int = 2048
    """Memory of a judge's whole process tree, by default (MiB)."""
    max_memory_mb: int = 16384
    """The most memory a job may ask for (MiB)."""
    processes: int = 256
    """Processes a judge may have at once, by default."""
    max_processes: int = 4096
    """The most processes a job may ask for."""
    file_size_mb: int = 256
    """Largest file a judge may write, by default (MiB)."""
    max_file_size_mb: int = 4096
    """The largest file size a job may ask for (MiB)."""
    unpack_bytes: int = 256 * MiB
    """Decompressed bytes of a submission archive, headers included, by default."""
    max_unpack_bytes: int = 4096 * MiB
    """The most decompressed bytes a job may ask for."""
    unpack_entries: int = 10_000
    """Files and folders a submission may hold, by default."""
    max_unpack_entries: int = 1_000_000
    """The most files and folders a job may ask for."""
    unpack_depth: int = 32
    """Folder nesting of a submission, by default."""
    max_unpack_depth: int = 256
    """The deepest nesting a job may ask for."""
    output_bytes: int = 64 * 1024
    """Captured stdout and stderr kept per stream in a verdict's metadata."""

    def resolve(self, requested: Limits | None = None) -> ResolvedLimits:
        """The limits for a job asking for ``requested``, capped by the operator's maxima."""
        asked = requested or Limits()

        def pick(name: str) -> Any:
            wish = getattr(asked, name)
            value = getattr(self, name) if wish is None else wish
            return min(value, getattr(self, f"max_{name}"))

        return ResolvedLimits(
            wall_s=pick("wall_s"),
            memory_mb=pick("memory_mb"),
            processes=pick("processes"),
            file_size_mb=pick("file_size_mb"),
            unpack_bytes=pick("unpack_bytes"),
            unpack_entries=pick("unpack_entries"),
            unpack_depth=pick("unpack_depth"),
            output_bytes=self.output_bytes,
        )


class RunSettings(BaseSettings):
    """The rest of a worker's (or ``chalk score``'s) process: task modules, folders, regexes."""

    model_config = _CONFIG

    task_modules: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Extra modules to import for custom judges (comma-separated), besides ``tasks.*``."""
    work_dir: str | None = None
    """Where job folders are made; default: the system's temporary folder."""
    embedded_concurrency: int = Field(default=0, ge=0)
    """Jobs scored at once without a cluster (``chalk score``, ``score_jobs``); 0 means 32."""
    regex_timeout_s: float = Field(default=10.0, gt=0)
    """Seconds one regex judge's searches may take in all; past it, a 0 with an error."""
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    """Where a worker serves its Prometheus metrics (``/metrics``); unset: not served."""

    _split_task_modules = field_validator("task_modules", mode="before")(_split_list)


class ProgramSettings(BaseSettings):
    """How ``tests`` judges build and run programs: compilers' limits, outputs, the build cache."""

    model_config = _CONFIG

    compile_wall_s: float = Field(default=60.0, gt=0)
    """Wall-clock seconds a compile may take; past it, the program does not compile (CE)."""
    compile_cpu_s: float = Field(default=30.0, gt=0)
    """CPU seconds each compiler process may use."""
    compile_memory_mb: int = Field(default=2048, ge=64)
    """Memory of a compile, the compiler and all it starts (MiB)."""
    program_output_mb: int = Field(default=64, ge=1)
    """Output a program may write to stdout in one test; past it, the test is ``OLE``."""
    kept_output_kb: int = Field(default=1024, ge=1)
    """Of a test's stdout (and of its stderr), what a judge with ``keep_output`` keeps in
    the result; the rest is cut off."""
    build_cache_mb: int = Field(default=512, ge=0)
    """Programs built, kept on the worker by their source, compiler and flags, so the same
    program is not compiled twice; 0 keeps none."""


def _allowlist(value: Any) -> Any:
    from chalk_client.callback_allowlist import CallbackAllowlist

    entries = _split_list(value)
    if isinstance(entries, list):
        CallbackAllowlist.parse(str(entry) for entry in entries)  # a bad entry: ValueError
    return entries


class CallbackSettings(BaseSettings):
    """How workers send batch callbacks: the secret that signs them, where they may go, retries.

    The workers' settings (they send); ``chalk serve`` reads ``CHALK_CALLBACK_ALLOW``
    too, to refuse at submit a callback URL the workers would refuse.
    """

    model_config = _CONFIG

    callback_secret: SecretStr | None = None
    """The key of the callbacks' signatures (``X-Chalk-Signature``: HMAC-SHA256 of the body);
    the receivers hold it too. Unset: no callback is sent (each waits, logged, until set)."""
    callback_allow: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["127.0.0.0/8", "::1"]
    )
    """Where callbacks may go: host names (exactly), IP addresses and CIDR networks,
    comma-separated. A host not listed by name must resolve only to listed addresses;
    by default loopback only. A URL outside it is refused, never sent."""
    callback_first_delay_s: float = Field(default=1.0, gt=0)
    """Wait before the first retry of a callback the receiver failed; it doubles (with
    jitter) at each failure, up to ``CHALK_CALLBACK_MAX_DELAY_S``."""
    callback_max_delay_s: float = Field(default=3600.0, gt=0)
    """The longest wait between two tries of one callback: 1 hour."""
    callback_give_up_s: float = Field(default=86400.0, gt=0)
    """How long after its batch finished a callback is still tried: 1 day; then it is
    given up (logged as an error, shown by ``chalk status``)."""
    callback_timeout_s: float = Field(default=10.0, gt=0)
    """Seconds each step of one try may take (connecting, sending, each read of the
    answer); a worker's claim on a callback it sends lasts three times this, plus 1 s."""

    _split = field_validator("callback_allow", mode="before")(_allowlist)


_Part = TypeVar("_Part", bound=BaseSettings)


class ChalkSettings(
    StoreSettings,
    LLMSettings,
    SandboxSettings,
    LimitSettings,
    ProgramSettings,
    CallbackSettings,
    RunSettings,
):
    """Every setting, from ``CHALK_*`` environment variables: the parts above, together."""

    model_config = _CONFIG

    def _part(self, kind: type[_Part]) -> _Part:
        values = {name: getattr(self, name) for name in kind.model_fields}
        part: _Part = kind.model_construct(**values)  # type: ignore[assignment]
        return part

    @property
    def store(self) -> StoreSettings:
        """The store settings alone."""
        return self._part(StoreSettings)

    @property
    def llm(self) -> LLMSettings:
        """The LLM settings alone."""
        return self._part(LLMSettings)

    @property
    def sandbox(self) -> SandboxSettings:
        """The sandbox settings alone."""
        return self._part(SandboxSettings)

    @property
    def limits(self) -> LimitSettings:
        """The job limits alone."""
        return self._part(LimitSettings)

    @property
    def programs(self) -> ProgramSettings:
        """The tests judge's settings alone (compiles, outputs, the build cache)."""
        return self._part(ProgramSettings)

    @property
    def callbacks(self) -> CallbackSettings:
        """The batch callbacks' settings alone (secret, allowlist, retries)."""
        return self._part(CallbackSettings)
