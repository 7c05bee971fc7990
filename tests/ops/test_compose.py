"""``docker-compose.yml`` and the ``Dockerfile``, checked without Docker (none on these machines).

The compose file is parsed (PyYAML) and each service's settings checked; every
command it runs is shown to exist: the ``chalk`` subcommands answer ``--help``
with the flags the file passes, and Redis is started here with the very flags
the file gives it, then asked what it is running with.
"""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from processes import free_port, need, stop, wait_port
from tornado.options import options

from chalk_client.settings import ChalkSettings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
ENV = {"REDIS_PASSWORD": "s3cret", "FLOWER_BASIC_AUTH": "admin:pw"}


def interpolate(value: Any) -> Any:
    """Compose's ``${NAME:-default}`` / ``${NAME:?error}``, from ``ENV`` (else the default)."""
    if isinstance(value, str):

        def replace(match: re.Match[str]) -> str:
            name, sep, rest = match.group(1), match.group(2), match.group(3) or ""
            return ENV.get(name, rest if sep == ":-" else "")

        return re.sub(r"\$\{(\w+)(:-|:\?)?([^}]*)\}", replace, value)
    if isinstance(value, list):
        return [interpolate(item) for item in value]
    if isinstance(value, dict):
        return {key: interpolate(item) for key, item in value.items()}
    return value


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return interpolate(yaml.safe_load(COMPOSE.read_text()))


def seconds(duration: str) -> float:
    """A compose duration (``11m``, ``90s``, ``1h30m``) in seconds."""
    units = {"h": 3600, "m": 60, "s": 1}
    parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(float(n) * units[u] for n, u in parts)


def chalk_help(*args: str) -> str:
    run = subprocess.run(
        [sys.executable, "-m", "chalk_client.cli", *args, "--help"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "CHALK_REDIS_URL": "redis://127.0.0.1:1/0"},
        cwd=ROOT,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_the_services_and_their_settings(compose):
    services = compose["services"]
    assert set(services) == {"redis", "worker", "flower"}
    redis_service = services["redis"]
    command = redis_service["command"]
    for flag, value in (
        ("--appendonly", "yes"),
        ("--appendfsync", "everysec"),
        ("--maxmemory-policy", "noeviction"),
        ("--requirepass", "s3cret"),
    ):
        assert command[command.index(flag) + 1] == value
    assert redis_service["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    assert redis_service["environment"]["REDISCLI_AUTH"] == "s3cret"
    assert any(volume.endswith(":/data") for volume in redis_service["volumes"])
    assert "redis-data" in compose["volumes"]

    worker = services["worker"]
    assert "container_name" not in worker and "ports" not in worker  # --scale worker=N
    assert worker["restart"] == "on-failure"
    assert worker["init"] is True
    env = worker["environment"]
    assert env["CHALK_REDIS_URL"] == "redis://:s3cret@redis:6379/0"
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "CHALK_RUBRIC_MODEL"):
        assert name in env and name in services["flower"]["environment"]
    longest = float(env["CHALK_MAX_WALL_S"])
    assert seconds(worker["stop_grace_period"]) > longest  # a stopped worker finishes its jobs
    assert longest <= ChalkSettings().max_wall_s
    assert worker["cap_add"] == ["SYS_ADMIN"]
    assert set(worker["security_opt"]) == {"seccomp=unconfined", "apparmor=unconfined"}
    assert worker["cgroup"] == "private"
    assert "/run/chalk-sandbox" in worker["tmpfs"]
    assert env["CHALK_METRICS_PORT"] in [str(port) for port in worker["expose"]]
    assert worker["depends_on"]["redis"]["condition"] == "service_healthy"

    flower = services["flower"]
    assert flower["ports"] == ["127.0.0.1:5555:5555"]
    assert flower["environment"]["FLOWER_BASIC_AUTH"] == "admin:pw"
    raw = yaml.safe_load(COMPOSE.read_text())
    assert ":?" in raw["services"]["flower"]["environment"]["FLOWER_BASIC_AUTH"]  # required


def test_the_chalk_commands_exist_with_their_flags(compose):
    services = compose["services"]
    worker, flower = services["worker"]["command"], services["flower"]["command"]
    assert worker[:2] == ["chalk", "worker"] and flower[:2] == ["chalk", "flower"]
    importlib.import_module("flower.options")  # defines Flower's options
    worker_help = chalk_help("worker")  # Celery's own worker command, for our app
    assert "--loglevel" in worker_help and "--concurrency" in worker_help
    assert "flower" in chalk_help("flower")  # Celery's flower command, for our app

    given = [arg.split("=", 1)[0].removeprefix("--") for arg in flower[2:]]
    from_env = [
        name.removeprefix("FLOWER_").lower()
        for name in services["flower"]["environment"]
        if name.startswith("FLOWER_")
    ]
    assert given + from_env == ["port", "basic_auth"]
    assert all(name in options for name in given + from_env)
    assert "[project.scripts]\nchalk = " in (ROOT / "pyproject.toml").read_text()


def test_redis_runs_with_the_compose_flags(compose, tmp_path: Path):
    if shutil.which("redis-server") is None:
        need("redis-server")
    command = compose["services"]["redis"]["command"]
    assert command[0] == "redis-server"
    port = free_port()
    proc = subprocess.Popen(
        [*command, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )
    try:
        assert wait_port(port)
        client = redis.Redis(port=port, password="s3cret")
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("appendfsync") == {"appendfsync": "everysec"}
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port).ping()
        check = subprocess.run(
            ["redis-cli", "-p", str(port), "ping"],
            env={"PATH": "/usr/bin:/bin", "REDISCLI_AUTH": "s3cret"},
            capture_output=True,
            text=True,
            timeout=10,
        )
        assert check.stdout.strip() == "PONG"  # the health check's command
    finally:
        stop(proc)


def test_the_dockerfile_builds_what_compose_runs():
    text = (ROOT / "Dockerfile").read_text()
    assert text.startswith("#") and "\nFROM python:3.11" in text
    assert "bubblewrap" in text and "util-linux" in text  # the sandbox's layers
    for package in ("chalk_client", "chalk_worker", "tasks"):
        assert f"COPY {package} ./{package}" in text
    assert 'pip install --no-cache-dir ".[worker]"' in text  # the worker's packages too
    assert 'CMD ["chalk", "worker", "--loglevel", "INFO"]' in text
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".git" in ignored and ".venv" in ignored
