"""The FastAPI app of ``chalk serve``: the gate, the three APIs, JSON errors.

``create_app()`` builds it in front of the queue ``CHALK_REDIS_URL`` names (the
embedded one when unset). Every refusal and every failure is JSON with an
``error`` and a ``detail``: a validation error lists what is wrong where,
without echoing what was sent; a queue that cannot be reached is a 503; a bug
of ours is a 500 that says so, and the server goes on.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException

from chalk_client.errors import QueueError
from chalk_client.server import judge0, native, sandbox_fusion
from chalk_client.server.gate import Gate
from chalk_client.server.problems import Problem
from chalk_client.server.queues import ServerQueue, make_queue
from chalk_client.server.settings import ServerSettings
from chalk_client.server.state import ServerState, json_response
from chalk_client.settings import ChalkSettings
from chalk_client.version import chalk_version

log = logging.getLogger("chalk.server")


def _error(error: dict[str, Any]) -> dict[str, Any]:
    """One error's place and words, without its input (it may be huge, or not JSON at all)."""
    if error.get("type") == "json_invalid":  # FastAPI's: the parser's own words in ctx
        why = (error.get("ctx") or {}).get("error", "")
        return {"loc": ["body"], "msg": f"not valid JSON: {why}".rstrip(": ")}
    return {"loc": [str(part) for part in error.get("loc", ())], "msg": str(error.get("msg", ""))}


def _errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    """What is wrong where (the first 50 things)."""
    return [_error(error) for error in exc.errors()[:50]]


def _handlers(app: FastAPI) -> None:
    @app.exception_handler(Problem)
    async def problem(request: Request, exc: Problem) -> Response:
        return json_response(exc.body(), exc.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        errors = _errors(exc)
        first = errors[0] if errors else {"loc": [], "msg": "invalid"}
        where = ".".join(first["loc"][1:] or first["loc"]) or "body"
        body = {"error": "invalid request", "detail": f"{where}: {first['msg']}", "errors": errors}
        return json_response(body, 422)

    @app.exception_handler(HTTPException)
    async def http(request: Request, exc: HTTPException) -> Response:
        detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        return json_response({"error": detail.lower(), "detail": detail}, exc.status_code)

    @app.exception_handler(QueueError)
    async def unavailable(request: Request, exc: QueueError) -> Response:
        body = {"error": "queue unavailable", "detail": str(exc)}
        return json_response(body, 503)

    @app.exception_handler(Exception)
    async def bug(request: Request, exc: Exception) -> Response:
        log.exception("%s %s failed", request.method, request.url.path)
        body = {"error": "internal error", "detail": f"{type(exc).__name__}: the server's fault"}
        return json_response(body, 500)


class _Redact(logging.Filter):
    """Takes the keys out of a log record (a client that put one in a URL, say)."""

    def __init__(self, keys: list[str]) -> None:
        super().__init__()
        self.keys = keys

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if any(key in text for key in self.keys):
            for key in self.keys:
                text = text.replace(key, "[key]")
            record.msg, record.args = text, ()
        return True


def _redact_in_logs(keys: list[str]) -> None:
    if not keys:
        return
    for name in ("uvicorn.access", "uvicorn.error", "chalk.server"):
        logger = logging.getLogger(name)
        logger.filters = [f for f in logger.filters if not isinstance(f, _Redact)]
        logger.addFilter(_Redact(keys))


def create_app(
    settings: ChalkSettings | None = None,
    limits: ServerSettings | None = None,
    queue: ServerQueue | None = None,
) -> Any:
    """The ASGI app: ``Gate`` in front of FastAPI's routes, scoring through ``queue``."""
    settings = settings or ChalkSettings()
    limits = limits or ServerSettings()
    chosen = queue or make_queue(settings, limits)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        chosen.warm()
        try:
            yield
        finally:
            await chosen.close()

    app = FastAPI(
        title="Chalk Queue",
        version=chalk_version(),
        description="Score programs and rollouts: Chalk's own API, and SandboxFusion's and "
        "Judge0's, on the same queue.",
        lifespan=lifespan,
    )
    app.state.chalk = ServerState(queue=chosen, limits=limits, settings=settings)
    _handlers(app)
    app.include_router(native.router)
    app.include_router(sandbox_fusion.router)
    app.include_router(judge0.router)

    @app.head("/health", include_in_schema=False)
    @app.get("/health", tags=["Chalk"])
    async def health() -> Response:
        """Whether the server and its queue can take work (no key needed)."""
        status = await chosen.health()
        return json_response({"version": chalk_version(), **status}, 200 if status["ok"] else 503)

    keys = [key.get_secret_value() for key in limits.api_keys]
    _redact_in_logs(keys)
    return Gate(
        app, keys=keys, max_body_bytes=limits.max_body_bytes, max_in_flight=limits.max_in_flight
    )
