"""``chalk serve``: the HTTP API on uvicorn, in front of the embedded queue or the cluster."""

from __future__ import annotations

import argparse
import importlib.util
import ipaddress

from chalk_client.errors import ConfigurationError, MissingExtraError
from chalk_client.extras import require_worker

COMMAND = "serve"
SERVER_PACKAGES = ("fastapi", "uvicorn")


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``chalk serve`` to the ``chalk`` command's parser."""
    serve = commands.add_parser(
        COMMAND,
        help="serve the HTTP API (Chalk's, SandboxFusion's /run_code, Judge0's)",
        description=(
            "Serve Chalk's HTTP API, SandboxFusion's /run_code and Judge0's /submissions in "
            "front of the embedded queue, or the cluster when CHALK_REDIS_URL is set. Without "
            "CHALK_API_KEYS it serves loopback only."
        ),
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    serve.add_argument("--port", type=int, default=8080, help="port to listen on (8080)")
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes (more than 1 needs CHALK_REDIS_URL: they share the cluster)",
    )
    serve.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    serve.add_argument(
        "--no-access-log", action="store_true", help="do not log each request (faster)"
    )


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_setup(host: str, workers: int) -> None:
    """Refuse what would serve unsafely or wrongly, saying why and what to do."""
    from chalk_client.server.settings import ServerSettings
    from chalk_client.settings import ChalkSettings

    settings = ChalkSettings()
    limits = ServerSettings()
    if not limits.api_keys and not _loopback(host):
        raise ConfigurationError(
            f"refusing to listen on {host} without keys: anyone who can reach it could run "
            "code on this machine. Set CHALK_API_KEYS (comma-separated) or serve on 127.0.0.1"
        )
    if workers < 1:
        raise ConfigurationError(f"--workers must be at least 1, not {workers}")
    if workers > 1 and not settings.redis_url:
        raise ConfigurationError(
            "--workers above 1 needs CHALK_REDIS_URL: without a cluster each process would "
            "keep its own jobs, and one could not answer for another's"
        )
    if not settings.redis_url:
        require_worker("chalk serve without CHALK_REDIS_URL (the embedded queue)")


def run_serve(args: argparse.Namespace) -> int:
    """Start uvicorn on ``chalk_client.server``'s app; returns the exit status."""
    missing = [name for name in SERVER_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtraError(
            f"chalk serve needs {', '.join(missing)}: pip install 'chalk-queue[server]'"
        )
    check_setup(args.host, args.workers)
    import uvicorn

    uvicorn.run(
        "chalk_client.server.app:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
        access_log=not args.no_access_log,
        timeout_graceful_shutdown=10,
    )
    return 0
