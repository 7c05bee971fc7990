"""What the LLM client tells whoever watches the worker: hooks the worker's metrics fill in.

``HOOKS.llm_request`` is called for every HTTP request to the LLM server (an
``httpx`` request, retries included), ``HOOKS.llm_response`` with every
response's status code. They do nothing until ``chalk_worker.metrics.install``
replaces them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx


def _ignored(*_: object) -> None:
    return None


@dataclass
class LLMHooks:
    """The LLM client's hooks; each one a no-op until replaced."""

    llm_request: Callable[[httpx.Request], None] = _ignored
    """Before each HTTP request (an ``httpx.Request``)."""
    llm_response: Callable[[int], None] = _ignored
    """After each HTTP response: its status code."""


HOOKS = LLMHooks()
"""The hooks the LLM client calls (``chalk_worker.metrics.install`` sets them)."""
