"""The HTTP server's settings: its keys and its limits, from ``CHALK_*`` variables.

``CHALK_API_KEYS`` (comma-separated) are the keys a request may carry; with none,
the server serves loopback only. The limits bound what one request may ask:
its body, the code and input in it, the time limits it sets, how long it may
wait for a result, and how many requests one key may have in flight.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

KiB = 1024
MiB = 1024 * 1024


def _keys(value: Any) -> Any:
    if isinstance(value, str):
        return [part.strip() for part in value.replace("\n", ",").split(",") if part.strip()]
    return value


class ServerSettings(BaseSettings):
    """``chalk serve``'s keys and limits (``CHALK_API_KEYS``, ``CHALK_SERVER_*``)."""

    model_config = SettingsConfigDict(env_prefix="CHALK_SERVER_", extra="ignore")

    api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list, validation_alias="CHALK_API_KEYS"
    )
    """Keys a request may carry (``Authorization: Bearer KEY`` or ``X-Auth-Token: KEY``)."""
    max_body_mb: float = Field(default=16.0, gt=0)
    """Largest request body; past it, 413."""
    max_code_kb: int = Field(default=512, ge=1)
    """Largest program source in one run (``/run_code``, ``/submissions``); past it, 413."""
    max_stdin_mb: float = Field(default=8.0, gt=0)
    """Largest stdin (or expected output) of one run; past it, 413."""
    max_time_limit_s: float = Field(default=60.0, gt=0)
    """Longest time limit a run may ask for (CPU or wall-clock); more is a 422."""
    max_memory_mb: int = Field(default=4096, ge=8)
    """Most memory a run may ask for; more is a 422."""
    max_wait_s: float = Field(default=300.0, gt=0)
    """Longest a request waits for its result (``/run_code``, ``?wait=true``); past it, 504."""
    max_in_flight: int = Field(default=64, ge=1)
    """Requests one key (or, without keys, one address) may have in flight; past it, 429."""
    max_batch: int = Field(default=10_000, ge=1)
    """Jobs in one ``POST /v1/jobs``; Judge0 batches take at most 20, as Judge0's do."""
    keep_results: int = Field(default=100_000, ge=1)
    """Results the embedded queue keeps for ``GET`` (the oldest are forgotten first)."""
    keep_results_mb: int = Field(default=512, ge=1)
    """The most memory the embedded queue's kept results may take (programs' outputs
    counted); past it, the oldest are forgotten first."""
    allow_commands: bool = False
    """Let jobs posted over HTTP run commands of their choosing (``executable`` judges,
    ``tests`` judges' checkers). Off: a key holder is not an operator."""

    _split = field_validator("api_keys", mode="before")(_keys)

    @property
    def max_body_bytes(self) -> int:
        """``max_body_mb`` in bytes."""
        return int(self.max_body_mb * MiB)

    @property
    def max_code_bytes(self) -> int:
        """``max_code_kb`` in bytes."""
        return self.max_code_kb * KiB

    @property
    def max_stdin_bytes(self) -> int:
        """``max_stdin_mb`` in bytes."""
        return int(self.max_stdin_mb * MiB)
