"""``docker-compose.yml`` and the ``Dockerfile``, checked without Docker (none on these machines).

The compose file is parsed (PyYAML) and each service's settings checked; every
command it runs is shown to exist: the ``chalk`` subcommands answer ``--help``
with the flags the file passes, and Redis is started here with the very flags
the file gives it, then asked what it is running with. The ``ha`` profile's
replica and Sentinels are started the same way, on loopback, and asked what they
see; the ``tls`` profile's Redis too, with certificates made here, and reached
with the workers' URL.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from certificates import make_certificates
from processes import free_port, need, stop, wait_port
from sentinel_cluster import healthy
from tornado.options import options

from chalk_client.settings import ChalkSettings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
ENV = {"REDIS_PASSWORD": "s3cret", "FLOWER_BASIC_AUTH": "admin:pw"}


# A ${...} with no ${ inside: nested ones are replaced from the inside out.
INNERMOST = re.compile(r"\$\{(\w+)(?:(:-|:\?)((?:(?!\$\{)[^}])*))?\}")


def interpolate(value: Any, env: dict[str, str] = ENV) -> Any:
    """Compose's ``${NAME:-default}`` / ``${NAME:?error}`` (nested too) from ``env``, else
    the default; ``$$`` is a ``$``."""
    if isinstance(value, str):

        def replace(match: re.Match[str]) -> str:
            name, sep, rest = match.group(1), match.group(2), match.group(3) or ""
            return env.get(name, rest if sep == ":-" else "")

        parts = value.split("$$")
        for index, part in enumerate(parts):
            while INNERMOST.search(part):
                part = INNERMOST.sub(replace, part)
            parts[index] = part
        return "$".join(parts)
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    return value


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return interpolate(yaml.safe_load(COMPOSE.read_text()))


def test_interpolate_reads_as_compose_does():
    env = {"A": "a"}
    assert interpolate("${A}-${B:-b}-${B:-x${A}y}-$${A}-${A:?set A}", env) == "a-b-xay-${A}-a"


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
    assert {name for name, service in services.items() if "profiles" not in service} == {
        "redis",
        "worker",
        "flower",
        "server",
    }
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
    assert env["CHALK_WORKER_PROCESSES"] == "1"  # scaled by containers: one port each
    assert worker["depends_on"]["redis"]["condition"] == "service_healthy"

    flower = services["flower"]
    assert flower["ports"] == ["127.0.0.1:5555:5555"]
    assert flower["environment"]["FLOWER_BASIC_AUTH"] == "admin:pw"
    raw = yaml.safe_load(COMPOSE.read_text())
    assert ":?" in raw["services"]["flower"]["environment"]["FLOWER_BASIC_AUTH"]  # required

    server = services["server"]
    assert server["ports"] == ["127.0.0.1:8080:8080"]
    assert server["environment"]["CHALK_REDIS_URL"] == env["CHALK_REDIS_URL"]  # the cluster
    assert ":?" in raw["services"]["server"]["environment"]["CHALK_API_KEYS"]  # required
    assert "container_name" not in server  # --scale server=N


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
    serve = services["server"]["command"]
    assert serve[:2] == ["chalk", "serve"]
    serve_help = chalk_help("serve")
    assert all(flag in serve_help for flag in serve[2:] if flag.startswith("--"))
    # Listening beyond loopback needs keys: the service would refuse to start without.
    env = {**os.environ, "CHALK_API_KEYS": ""}
    refused = subprocess.run(
        [sys.executable, "-m", "chalk_client.cli", *serve[1:]],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "CHALK_API_KEYS" in refused.stderr
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


SENTINELS = ("sentinel-1", "sentinel-2", "sentinel-3")
HA_SERVICES = {"redis-replica", *SENTINELS}
TLS_SERVICES = {"redis-tls", "worker-tls", "flower-tls", "server-tls"}


def sentinel_config(service: dict[str, Any]) -> list[str]:
    """The lines a sentinel service's shell command writes to its ``sentinel.conf``."""
    shell, flag, script = service["command"]
    assert (shell, flag) == ("sh", "-c")
    heredoc = re.search(r"<<EOF\n(.*?)\nEOF\n", script, re.S)
    assert heredoc, script
    return heredoc.group(1).splitlines()


def test_the_ha_profile_adds_a_replica_and_three_sentinels(compose):
    services = compose["services"]
    assert {name for name, service in services.items() if "profiles" in service} == (
        HA_SERVICES | TLS_SERVICES
    )
    assert all(services[name]["profiles"] == ["ha"] for name in HA_SERVICES)
    for name in ("worker", "flower"):  # they start without the profile too
        assert not HA_SERVICES & set(services[name]["depends_on"])

    master, replica = services["redis"]["command"], services["redis-replica"]["command"]
    for flag, value in (
        ("--appendonly", "yes"),  # persisted and never evicting, as the master
        ("--appendfsync", "everysec"),
        ("--maxmemory-policy", "noeviction"),
        ("--requirepass", "s3cret"),
    ):
        assert replica[replica.index(flag) + 1] == value
    for command, name in ((master, "redis"), (replica, "redis-replica")):
        assert command[command.index("--masterauth") + 1] == "s3cret"  # either may follow
        assert command[command.index("--replica-announce-ip") + 1] == name
    assert replica[replica.index("--replicaof") + 1 :][:2] == ["redis", "6379"]
    assert services["redis-replica"]["volumes"] == ["redis-replica-data:/data"]
    assert services["redis-replica"]["healthcheck"] == services["redis"]["healthcheck"]
    assert services["redis-replica"]["environment"]["REDISCLI_AUTH"] == "s3cret"

    volumes = set()
    for name in SENTINELS:
        sentinel = services[name]
        config = sentinel_config(sentinel)
        assert config[:2] == ["port 26379", "sentinel resolve-hostnames yes"]  # before monitor
        for line in (
            "sentinel announce-hostnames yes",
            "sentinel announce-ip $SENTINEL_NAME",
            "sentinel monitor chalk redis 6379 2",
            "sentinel auth-pass chalk s3cret",
        ):
            assert line in config
        assert sentinel["environment"] == {"SENTINEL_NAME": name}
        assert sentinel["depends_on"]["redis"]["condition"] == "service_healthy"
        volumes.update(sentinel["volumes"])
    assert len(volumes) == 3  # each remembers what it learnt
    declared = set(compose["volumes"])
    assert {volume.split(":")[0] for volume in volumes} | {"redis-replica-data"} <= declared


def test_the_sentinel_url_reaches_the_workers_when_set(compose):
    header = COMPOSE.read_text().split("\nx-chalk-env")[0]
    url = re.search(r'export CHALK_REDIS_URL="(sentinel://[^"]+)"', header)
    assert url and "docker compose --profile ha up -d" in header
    assert sorted(re.findall(r"sentinel://(?::\$REDIS_PASSWORD@)?([\w-]+):26379", url[1])) == (
        list(SENTINELS)
    )
    assert url[1].startswith("sentinel://:$REDIS_PASSWORD@")  # the master's password
    assert url[1].endswith("/0?master_name=chalk")  # as the sentinels monitor it

    with_url = interpolate(yaml.safe_load(COMPOSE.read_text()), {**ENV, "CHALK_REDIS_URL": url[1]})
    for name in ("worker", "flower"):
        assert with_url["services"][name]["environment"]["CHALK_REDIS_URL"] == url[1]
        assert compose["services"][name]["environment"]["CHALK_REDIS_URL"] == (
            "redis://:s3cret@redis:6379/0"
        )


def data_node_here(command: list[str], ports: dict[str, int], workdir: Path) -> list[str]:
    """A data node's compose command for this machine: the compose hostnames (redis,
    redis-replica) as 127.0.0.1, their ports from ``ports``; its port, address, directory."""
    here = [
        "127.0.0.1" if arg in ports else str(ports[command[i - 1]]) if arg == "6379" else arg
        for i, arg in enumerate(command)
    ]
    port = ports[workdir.name]
    return [*here, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir)]


def sentinel_script_here(script: str, workdir: Path, port: int, master_port: int) -> str:
    """A sentinel service's shell script for this machine: its directory, port, master."""
    for compose_text, local in (
        ("/data/", f"{workdir}/"),
        ("port 26379", f"port {port}"),
        ("monitor chalk redis 6379", f"monitor chalk 127.0.0.1 {master_port}"),
        ("docker-entrypoint.sh redis-server", "redis-server"),  # the image's user switch
        ("--sentinel", "--sentinel --bind 127.0.0.1"),
    ):
        assert compose_text in script
        script = script.replace(compose_text, local)
    return script


def start_logged(argv: list[str], port: int, log: Path, **env: str) -> subprocess.Popen[bytes]:
    """Start ``argv`` with its output in ``log``; fail with the log unless ``port`` opens."""
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=out, env={**os.environ, **env})
    assert wait_port(port), log.read_text()
    return proc


def sees_master_and_replica(sentinel_port: int, ports: dict[str, int]) -> bool:
    """Whether a sentinel sees redis up as master, redis-replica up, and two other sentinels."""
    with redis.Redis(port=sentinel_port, decode_responses=True) as sentinel:
        master = sentinel.sentinel_master("chalk")
        replicas = sentinel.sentinel_slaves("chalk")
        others = sentinel.sentinel_sentinels("chalk")
    return (
        healthy(master, "is_master")
        and master["port"] == ports["redis"]
        and [r["port"] for r in replicas if healthy(r, "is_slave")] == [ports["redis-replica"]]
        and len(others) == 2
    )


@pytest.mark.slow
def test_the_ha_profile_runs_with_the_compose_config(compose, tmp_path: Path):
    """Redis, its replica and the three Sentinels, started as compose starts them (on
    loopback), see each other; a restarted Sentinel remembers what it learnt."""
    if shutil.which("redis-server") is None:
        need("redis-server")
    services = compose["services"]
    ports = {name: free_port() for name in ("redis", "redis-replica", *SENTINELS)}
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(name: str) -> None:
        workdir = tmp_path / name
        workdir.mkdir(exist_ok=True)
        log = tmp_path / f"{name}.log"
        if name in SENTINELS:
            script = sentinel_script_here(
                services[name]["command"][2], workdir, ports[name], ports["redis"]
            )
            procs[name] = start_logged(
                ["sh", "-c", script], ports[name], log, SENTINEL_NAME="127.0.0.1"
            )
        else:
            argv = data_node_here(services[name]["command"], ports, workdir)
            procs[name] = start_logged(argv, ports[name], log)

    try:
        for name in ports:
            start(name)
        deadline = time.monotonic() + 20  # the replica's first sync waits 5 s (Redis' default)
        while not all(sees_master_and_replica(ports[name], ports) for name in SENTINELS):
            if time.monotonic() > deadline:
                pytest.fail(
                    "\n".join(f"{log.name}: {log.read_text()}" for log in tmp_path.glob("*.log"))
                )
            time.sleep(0.2)
        with redis.Redis(port=ports["sentinel-1"], decode_responses=True) as sentinel:
            master = sentinel.sentinel_master("chalk")
        assert master["down-after-milliseconds"] == 5000 and master["quorum"] == 2

        config = tmp_path / "sentinel-1" / "sentinel.conf"
        learnt = config.read_text()
        assert f"sentinel known-replica chalk 127.0.0.1 {ports['redis-replica']}" in learnt
        stop(procs["sentinel-1"])
        start("sentinel-1")  # its script finds the config it rewrote, and keeps it
        myid = re.compile(r"sentinel myid (\w+)")
        assert myid.findall(config.read_text()) == myid.findall(learnt)
        assert "known-replica" in config.read_text()
    finally:
        for proc in procs.values():
            stop(proc)


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_tls_profile_is_the_cluster_on_mutual_tls(compose):
    services = compose["services"]
    assert all(services[name]["profiles"] == ["tls"] for name in TLS_SERVICES)
    server = services["redis-tls"]["command"]
    plain = services["redis"]["command"]
    for name in ("--appendonly", "--appendfsync", "--maxmemory-policy", "--requirepass"):
        assert flag(server, name) == flag(plain, name)  # persisted, never evicting, a password
    assert flag(server, "--port") == "0" and flag(server, "--tls-port") == "6380"  # TLS only
    assert flag(server, "--tls-auth-clients") == "yes"
    assert services["redis-tls"]["volumes"] == ["redis-tls-data:/data", "./tls:/tls:ro"]
    assert "redis-tls-data" in compose["volumes"]
    assert services["redis-tls"]["ports"] == ["6380:6380"]
    for name, plain_name in (
        ("worker-tls", "worker"),
        ("flower-tls", "flower"),
        ("server-tls", "server"),
    ):
        service, twin = services[name], services[plain_name]
        assert service["command"] == twin["command"] and service["image"] == twin["image"]
        assert service["volumes"] == ["./tls:/tls:ro"]
        assert service["depends_on"] == {"redis-tls": {"condition": "service_healthy"}}
        env = service["environment"]
        assert env == {**twin["environment"], "CHALK_REDIS_URL": env["CHALK_REDIS_URL"]}
        url = env["CHALK_REDIS_URL"]
        assert url.startswith("rediss://:s3cret@redis-tls:6380/0?ssl_cert_reqs=required&")
        for part in ("ssl_ca_certs=/tls/ca.crt", "ssl_certfile=/tls/client.crt"):
            assert part in url
    assert services["worker-tls"]["cap_add"] == services["worker"]["cap_add"]  # the sandbox


def test_redis_tls_runs_with_the_compose_flags(compose, tmp_path: Path):
    """redis-tls started with its compose flags (its certificates here, on loopback): the
    workers' URL reaches it, a client without a certificate does not, the health check
    passes."""
    if shutil.which("redis-server") is None:
        need("redis-server")
    made = make_certificates(tmp_path / "tls", "redis-tls")
    port = free_port()
    here = [
        arg.replace("/tls/", f"{made.folder}/")
        for arg in compose["services"]["redis-tls"]["command"]
    ]
    here[here.index("--tls-port") + 1] = str(port)
    proc = subprocess.Popen(
        [*here, "--bind", "127.0.0.1", "--dir", str(tmp_path)], stdout=subprocess.DEVNULL
    )
    try:
        assert wait_port(port)
        url = compose["services"]["worker-tls"]["environment"]["CHALK_REDIS_URL"]
        local = url.replace("redis-tls:6380", f"127.0.0.1:{port}").replace(
            "/tls/", f"{made.folder}/"
        )
        with redis.Redis.from_url(local) as client:
            assert client.ping()
            assert client.config_get("tls-auth-clients") == {"tls-auth-clients": "yes"}
        without = local.split("&ssl_certfile=")[0]
        with pytest.raises(redis.ConnectionError), redis.Redis.from_url(without) as client:
            client.ping()
        check = compose["services"]["redis-tls"]["healthcheck"]["test"][1:]
        check = [arg.replace("/tls/", f"{made.folder}/") for arg in check]
        check[check.index("-p") + 1] = str(port)
        pong = subprocess.run(
            check,
            env={"PATH": "/usr/bin:/bin", "REDISCLI_AUTH": "s3cret"},
            capture_output=True,
            text=True,
            timeout=10,
        )
        assert pong.stdout.strip() == "PONG", pong.stderr
    finally:
        stop(proc)


def test_the_dockerfile_builds_what_compose_runs():
    text = (ROOT / "Dockerfile").read_text()
    assert text.startswith("#") and "\nFROM python:3.11" in text
    assert "bubblewrap" in text and "util-linux" in text  # the sandbox's layers
    for toolchain in ("g++", "openjdk-17-jdk-headless", "golang-go", "rustc", "nodejs"):
        assert toolchain in text  # the tests judge's languages
    for package in ("chalk_client", "chalk_worker", "tasks"):
        assert f"COPY {package} ./{package}" in text
    assert 'pip install --no-cache-dir ".[worker,server]"' in text  # worker's and server's
    assert 'CMD ["chalk", "worker", "--loglevel", "INFO"]' in text
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".git" in ignored and ".venv" in ignored
    assert "tls" in ignored  # the tls profile's private keys stay out of the build
