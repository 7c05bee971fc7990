"""Across a real network: hosts in network namespaces, links cut, healed and slowed.

Redis runs on a host of its own, workers on others (started with ``nsenter
--net=``, so the sandbox keeps its cgroups), and the test process is the client's
host (``chalk_worker.testing.network``). Every test ends with each job holding
exactly one result.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from certificates import make_certificates
from processes import Worker, WorkerFactory, need
from support import logged_jobs, wait_until

from chalk_client import ChalkClient, JobStatus, ScoringJob
from chalk_client.errors import QueueUnavailableError
from chalk_client.judges import AlwaysPassJudge
from chalk_worker.testing import network
from chalk_worker.testing.network import Host, Network
from chalk_worker.testing.redis_server import stop

pytestmark = pytest.mark.slow


@dataclass
class Hosts:
    """The test network: Redis's host and URL, two workers' hosts, a slowed one, the client."""

    net: Network
    redis: Host
    url: str
    w1: Host
    w2: Host
    far: Host
    client: Host


@pytest.fixture(scope="module")
def hosts() -> Iterator[Hosts]:
    why = network.available()
    if why is not None:
        need(f"network namespaces ({why})")
    with Network() as net:
        redis_host = net.add_host("redis")
        w1, w2 = net.add_host("w1"), net.add_host("w2")
        far = net.add_host("far", delay_ms=100, jitter_ms=30, loss=0.03)
        client = net.add_host("client", netns=False)
        proc, url = network.start_redis(redis_host, "--databases", "64")
        try:
            yield Hosts(net, redis_host, url, w1, w2, far, client)
        finally:
            stop(proc)


_db = iter(range(1, 64))


@pytest.fixture
def url(hosts: Hosts) -> Iterator[str]:
    """A database of its own for the test; links healed afterwards."""
    made = hosts.url.rsplit("/", 1)[0] + f"/{next(_db)}"
    yield made
    for host in (hosts.w1, hosts.w2, hosts.far, hosts.client):
        host.heal()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[WorkerFactory]:
    factory = WorkerFactory(tmp_path)
    yield factory
    for worker in factory.started:  # cut off and stopped: never left behind
        if worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.wait()


def events(log: Path, event: str, pid: int | None = None) -> list[str]:
    if not log.exists():
        return []
    found = []
    for line in log.read_text().splitlines():
        kind, key, by = line.split()
        if kind == event and (pid is None or int(by) == pid):
            found.append(key)
    return found


def one_result_each(client: ChalkClient, jobs: list[ScoringJob]) -> None:
    for job in jobs:
        result = client.get(job.id)
        assert result is not None and result.status is JobStatus.SUCCEEDED, (job.id, result)


def start(workers: WorkerFactory, url: str, host: Host, **env: str) -> Worker:
    return workers(url, concurrency=8, env=env, on_host=host.command)


def test_a_worker_cut_off_mid_batch_loses_nothing(
    hosts: Hosts, url: str, workers: WorkerFactory, tmp_path: Path
) -> None:
    log = tmp_path / "scorings.log"
    w1 = start(workers, url, hosts.w1)
    start(workers, url, hosts.w2)
    jobs = logged_jobs("cut", 40, log, sleep_s=0.3)
    with ChalkClient(url) as client:
        batch = client.submit_batch(jobs)
        wait_until(lambda: len(events(log, "start", w1.pid)) >= 3, 30, "w1 to start jobs")
        hosts.w1.cut()
        time.sleep(8.0)  # four leases (CHALK_LEASE_S=2): w2 takes over what w1 held
        hosts.w1.heal()
        results = batch.wait(timeout=120)
        assert len(results) == len(jobs)
        one_result_each(client, jobs)
    cut_short = set(events(log, "start", w1.pid)) - set(events(log, "end", w1.pid))
    rescored = set(events(log, "end")) - set(events(log, "end", w1.pid))
    assert cut_short <= rescored | set(events(log, "end", w1.pid))


def test_a_client_cut_off_mid_submit_gets_a_clear_error_then_submits_again(
    hosts: Hosts, url: str, workers: WorkerFactory
) -> None:
    start(workers, url, hosts.w1)
    jobs = [ScoringJob(id=f"sub-{i:05d}", judge=AlwaysPassJudge()) for i in range(20_000)]
    raised: list[BaseException] = []

    def submit() -> None:
        try:
            with ChalkClient(url) as client:
                client.submit_batch(jobs)
        except BaseException as exc:
            raised.append(exc)

    sender = threading.Thread(target=submit)
    sender.start()
    time.sleep(0.3)
    hosts.client.cut()
    cut_at = time.monotonic()
    sender.join(60)
    took = time.monotonic() - cut_at
    assert not sender.is_alive(), "the submit hung on a cut link"
    assert raised and isinstance(raised[0], QueueUnavailableError), raised
    assert took < 30, f"the error took {took:.0f} s"
    hosts.client.heal()
    with ChalkClient(url) as client:
        batch = client.submit_batch(jobs[:300])  # what a user retrying would send again
        assert len(batch.wait(timeout=120)) == 300
        one_result_each(client, jobs[:300])


def test_a_client_cut_off_mid_wait_gets_every_result_after_the_heal(
    hosts: Hosts, url: str, workers: WorkerFactory, tmp_path: Path
) -> None:
    start(workers, url, hosts.w1)
    jobs = logged_jobs("wait", 24, tmp_path / "scorings.log", sleep_s=0.3)
    with ChalkClient(url) as client:
        batch = client.submit_batch(jobs)
        hosts.client.cut()
        time.sleep(4.0)
        hosts.client.heal()
        assert len(batch.wait(timeout=120)) == len(jobs)
        one_result_each(client, jobs)


def test_sigterm_ends_a_worker_cut_off_from_redis_within_its_grace(
    hosts: Hosts, url: str, workers: WorkerFactory, tmp_path: Path
) -> None:
    log = tmp_path / "scorings.log"
    w1 = start(workers, url, hosts.w1, CHALK_SHUTDOWN_GRACE_S="4")
    jobs = logged_jobs("term", 16, log, sleep_s=0.5)
    with ChalkClient(url) as client:
        batch = client.submit_batch(jobs)
        wait_until(lambda: len(events(log, "start", w1.pid)) >= 4, 30, "w1 to start jobs")
        hosts.w1.cut()
        # Its running jobs end while it is cut off: their results cannot be stored.
        wait_until(lambda: len(events(log, "end", w1.pid)) >= 4, 30, "w1 to finish jobs")
        told = time.monotonic()
        w1.proc.send_signal(signal.SIGTERM)
        w1.proc.wait(30)
        took = time.monotonic() - told
        assert took < 4 + 5, f"stopped {took:.1f} s after SIGTERM (grace 4 s)"
        assert "grace period of 4 s" in w1.text() or "stops now" in w1.text(), w1.text()[-2000:]
        start(workers, url, hosts.w2)
        assert len(batch.wait(timeout=120)) == len(jobs)
        one_result_each(client, jobs)


def test_a_second_sigterm_stops_a_cut_off_worker_at_once(
    hosts: Hosts, url: str, workers: WorkerFactory, tmp_path: Path
) -> None:
    log = tmp_path / "scorings.log"
    w1 = start(workers, url, hosts.w1, CHALK_SHUTDOWN_GRACE_S="60")
    jobs = logged_jobs("twice", 8, log, sleep_s=0.3)
    with ChalkClient(url) as client:
        client.submit_batch(jobs)
        wait_until(lambda: len(events(log, "end", w1.pid)) >= 2, 30, "w1 to finish jobs")
        hosts.w1.cut()
        time.sleep(0.5)
        w1.proc.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        assert w1.proc.poll() is None  # the first: a warm stop, still waiting on Redis
        told = time.monotonic()
        w1.proc.send_signal(signal.SIGTERM)
        w1.proc.wait(30)
        assert time.monotonic() - told < 5
        assert "told to stop again (SIGTERM)" in w1.text(), w1.text()[-2000:]


def test_a_worker_on_a_slow_lossy_link_scores_every_job_once(
    hosts: Hosts, url: str, workers: WorkerFactory
) -> None:
    workers(url, concurrency=16, on_host=hosts.far.command, wait=True)
    jobs = [ScoringJob(id=f"far-{i:03d}", judge=AlwaysPassJudge()) for i in range(150)]
    with ChalkClient(url) as client:
        assert len(client.submit_batch(jobs).wait(timeout=180)) == len(jobs)
        one_result_each(client, jobs)


def test_tls_across_the_network_with_a_ca(
    hosts: Hosts, workers: WorkerFactory, tmp_path: Path
) -> None:
    made = make_certificates(tmp_path / "tls", hosts.redis.address)
    other = make_certificates(tmp_path / "another-ca").ca
    ca, cert, key = made.ca, made.server_cert, made.server_key
    # fmt: off
    proc = hosts.redis.popen(
        "redis-server", "--port", "0", "--tls-port", "6380", "--bind", hosts.redis.address,
        "--tls-cert-file", str(cert), "--tls-key-file", str(key), "--tls-ca-cert-file", str(ca),
        "--tls-auth-clients", "no", "--protected-mode", "no", "--save", "", "--dir", str(tmp_path),
        stdout=subprocess.DEVNULL,
    )
    # fmt: on
    try:
        base = f"rediss://{hosts.redis.address}:6380/0"
        url = f"{base}?ssl_cert_reqs=required&ssl_ca_certs={ca}"
        wait_until(lambda: _answers(url), 10, "redis-server to answer over TLS")
        start(workers, url, hosts.w1)
        jobs = [ScoringJob(id=f"tls-{i}", judge=AlwaysPassJudge()) for i in range(20)]
        with ChalkClient(url) as client:
            assert len(client.submit_batch(jobs).wait(timeout=60)) == len(jobs)
            one_result_each(client, jobs)
        wrong = f"{base}?ssl_cert_reqs=required&ssl_ca_certs={other}"
        began = time.monotonic()
        with pytest.raises(QueueUnavailableError), ChalkClient(wrong) as client:
            client.submit_batch([ScoringJob(id="tls-wrong", judge=AlwaysPassJudge())])
        assert time.monotonic() - began < 10
    finally:
        stop(proc)


def _answers(url: str) -> bool:
    try:
        with redis.Redis.from_url(url, socket_connect_timeout=1) as client:
            return bool(client.ping())
    except redis.RedisError:
        return False
