"""Mutual TLS on a real Redis: ``--tls-port`` only, ``tls-auth-clients yes``.

A client and a ``chalk worker`` whose ``rediss://`` URLs carry a certificate the
server's CA signed score a job; Flower's app hands the certificate to the
client Flower makes for its Broker page; without a certificate the client, the
``chalk`` command and a starting worker are refused, and say what to add to the URL.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from certificates import Certificates, make_certificates
from processes import WorkerFactory, free_port, start_redis, stop
from support import say

from chalk_client import ChalkClient, ChalkSettings, JobStatus, ScoringJob
from chalk_client.errors import ConfigurationError
from chalk_client.judges import RegexJudge

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Certificates]]:
    """A redis-server that speaks TLS only and asks every client for a certificate."""
    made = make_certificates(tmp_path_factory.mktemp("certificates"))
    port = free_port()
    # start_redis's own --port is overridden (the last one counts): no plain-text port.
    # fmt: off
    proc = start_redis(port, tmp_path_factory.mktemp("tls-redis"), args=(
        "--port", "0",
        "--tls-port", str(port),
        "--tls-cert-file", str(made.server_cert),
        "--tls-key-file", str(made.server_key),
        "--tls-ca-cert-file", str(made.ca),
        "--tls-auth-clients", "yes",
    ))
    # fmt: on
    yield port, made
    stop(proc)


def url(port: int, made: Certificates, *, client_cert: bool = True) -> str:
    return f"rediss://127.0.0.1:{port}/0?{made.query(client_cert=client_cert)}"


@pytest.mark.slow
def test_a_client_and_a_worker_with_certificates_score_a_job(tls, tmp_path: Path):
    port, made = tls
    workers = WorkerFactory(tmp_path)
    try:
        refused = workers(url(port, made, client_cert=False), concurrency=1, wait=False)
        worker = workers(url(port, made), concurrency=2)
        with ChalkClient(url(port, made), settings=ChalkSettings()) as client:
            result = client.submit_and_wait(
                ScoringJob(id="tls-one", transcript=say("42"), judge=RegexJudge(["42"])),
                timeout=30,
            )
        assert result.status is JobStatus.SUCCEEDED and result.score == 1.0, result.error
        assert result.worker and result.worker.startswith(worker.name + "@")
        # A worker without a certificate waits for Redis, saying what its URL lacks.
        refused.wait_for("CHALK_REDIS_URL gives none: add ssl_certfile=", timeout=20)
        assert "client certificate" in refused.text()
    finally:
        workers.stop_all()


def test_flowers_app_passes_the_certificate_on(tls):
    from chalk_worker.app import make_flower_app

    port, made = tls
    app = make_flower_app(ChalkSettings(), url(port, made))
    given = app.conf.broker_use_ssl
    assert given["ssl_certfile"] == str(made.client_cert)
    assert given["ssl_keyfile"] == str(made.client_key)
    assert given["ssl_ca_certs"] == str(made.ca)


def test_without_a_certificate_the_client_is_refused_and_told_what_to_add(tls):
    port, made = tls
    client = ChalkClient(url(port, made, client_cert=False), settings=ChalkSettings())
    with client, pytest.raises(ConfigurationError) as refused:
        client.get("any")
    message = str(refused.value)
    assert f"Redis at rediss://127.0.0.1:{port}/0" in message
    assert "client certificate" in message and "ssl_certfile=" in message
    assert "ssl_keyfile=" in message


def test_without_a_certificate_chalk_status_says_so(tls):
    port, made = tls
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHALK_")}
    run = subprocess.run(
        [sys.executable, "-m", "chalk_client.cli", "status"],
        env={**env, "CHALK_REDIS_URL": url(port, made, client_cert=False)},
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert run.returncode == 2
    assert "client certificate" in run.stderr and "ssl_certfile=" in run.stderr
