"""``ChalkClient`` when things go wrong: a broker that is down, Redis out of memory, zero
timeouts, waiters that leave nothing behind, a malformed URL.

Real processes throughout: a second redis-server plays the separate broker
(``CHALK_BROKER_URL``), stopped and started again; another one runs out of memory.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from processes import free_port, start_redis, stop
from queueing import pop_waiting

from chalk_client import (
    AsyncChalkClient,
    ChalkClient,
    ChalkError,
    ChalkSettings,
    JobResult,
    JobStatus,
    ResultTimeout,
    ScoringJob,
)
from chalk_client import broker as broker_module
from chalk_client import handles as handles_module
from chalk_client.cluster.keys import DONE_TTL_S
from chalk_client.errors import (
    ConfigurationError,
    QueueUnavailableError,
    StoreFullError,
    StoreRefusedError,
)
from chalk_client.judges import AlwaysPassJudge, CustomJudge
from chalk_client.records import prepare_job
from chalk_worker.cluster.leases import LeaseStore

ROOT = Path(__file__).resolve().parents[3]


def logged(scorings, key: str, **params) -> CustomJudge:
    return CustomJudge("test_log", {"log": scorings.path, "key": key, **params})


def ends(scorings) -> Counter[str]:
    return Counter(key for event, key, _ in scorings() if event == "end")


def done_lists(url: str) -> list[bytes]:
    return sorted(redis.Redis.from_url(url).keys("chalk:done:*"))


@pytest.fixture
def fast_publish(monkeypatch: pytest.MonkeyPatch) -> None:
    """A publish to a broker that is down fails in well under a second."""
    monkeypatch.setattr(
        broker_module,
        "RETRY_POLICY",
        {"max_retries": 1, "interval_start": 0, "interval_step": 0.1, "interval_max": 0.1},
    )


class BrokerServer:
    """A redis-server playing a separate broker, on a port kept across stops and starts."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/2"

    def start(self) -> None:
        self.proc = start_redis(self.port, self.workdir)

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)
            self.proc = None


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerServer]:
    """A second redis-server as the broker, not started yet (stopped at the end)."""
    server = BrokerServer(tmp_path)
    yield server
    server.stop()


# 1. A failed publish leaves nothing claimed ------------------------------------------


def test_a_job_whose_publish_failed_is_scored_when_submitted_again(
    own_redis_url, broker, start_worker, scorings, fast_publish, make_client
):
    client = make_client(own_redis_url, broker_url=broker.url)
    one = ScoringJob(id="pub-1", judge=logged(scorings, "pub-1"))
    many = [ScoringJob(id=f"pub-b{i}", judge=logged(scorings, f"pub-b{i}")) for i in range(3)]

    with pytest.raises(QueueUnavailableError) as caught:
        client.submit(one)
    message = str(caught.value)
    assert "could not publish to the broker" in message
    assert "Job 'pub-1' was not queued" in message and "again is safe" in message
    assert caught.value.not_queued == ("pub-1",)

    with pytest.raises(QueueUnavailableError) as caught:
        client.submit_batch(many, batch_id="b-pub")
    message = str(caught.value)
    assert "0 of 3 jobs of batch b-pub were submitted; 3 were not queued" in message
    assert "('pub-b0', 'pub-b1', 'pub-b2')" in message
    assert "Submitting them again, or the whole batch" in message and "is safe" in message
    assert caught.value.not_queued == ("pub-b0", "pub-b1", "pub-b2")
    assert caught.value.batch_id == "b-pub"

    async def async_submit() -> None:
        async with AsyncChalkClient(own_redis_url, broker_url=broker.url) as chalk:
            with pytest.raises(QueueUnavailableError) as caught:
                await chalk.submit(ScoringJob(id="pub-a", judge=logged(scorings, "pub-a")))
            assert caught.value.not_queued == ("pub-a",)
            assert "again is safe" in str(caught.value)

    asyncio.run(async_submit())
    store = redis.Redis.from_url(own_redis_url)
    assert store.keys("chalk:job:*") == []  # nothing left claimed

    broker.start()
    start_worker(own_redis_url, env={"CHALK_BROKER_URL": broker.url})
    result = client.submit_and_wait(one, 20)
    assert (result.status, result.attempts) == (JobStatus.SUCCEEDED, 1)
    batch = client.submit_batch(many, batch_id="b-pub")
    assert [r.job_id for r in batch.wait(20)] == ["pub-b0", "pub-b1", "pub-b2"]
    assert [r.job_id for r in client.batch("b-pub").results(20)] == ["pub-b0", "pub-b1", "pub-b2"]

    async def async_again() -> JobResult:
        async with AsyncChalkClient(own_redis_url, broker_url=broker.url) as chalk:
            return await chalk.submit_and_wait(
                ScoringJob(id="pub-a", judge=logged(scorings, "pub-a")), 20
            )

    assert asyncio.run(async_again()).status is JobStatus.SUCCEEDED
    assert ends(scorings) == dict.fromkeys(["pub-1", "pub-a", "pub-b0", "pub-b1", "pub-b2"], 1)
    assert store.hkeys("chalk:job:pub-1").count(b"unpublished") == 0
    client.close()


def test_a_record_a_dead_client_left_unpublished_is_sent_by_the_next_submit(
    own_redis_url, broker, start_worker, scorings
):
    broker.start()
    start_worker(own_redis_url, env={"CHALK_BROKER_URL": broker.url})
    client = ChalkClient(own_redis_url, broker_url=broker.url)
    orphan = ScoringJob(id="orphan", judge=logged(scorings, "orphan"))
    # A client that recorded the job and died before publishing it:
    list(client.store.submit([prepare_job(orphan)], waiter="w-dead", messages=None))
    assert redis.Redis.from_url(own_redis_url).hget("chalk:job:orphan", "unpublished")
    assert client.submit_and_wait(orphan, 20).status is JobStatus.SUCCEEDED
    assert ends(scorings) == {"orphan": 1}
    client.close()


def test_a_batch_whose_publish_stopped_halfway_names_the_jobs_left_and_is_sent_whole_again(
    own_redis_url, broker, start_worker, scorings, monkeypatch
):
    broker.start()
    start_worker(own_redis_url, env={"CHALK_BROKER_URL": broker.url})
    sent_then_lost = broker_module.KombuPublisher._publish

    def flaky(self, job_ids, batch):  # the third message goes out, then the broker is gone
        for n, job_id in enumerate(sent_then_lost(self, job_ids, batch)):
            if n == 2:
                raise ConnectionError("the broker went away")
            yield job_id

    monkeypatch.setattr(broker_module.KombuPublisher, "_publish", flaky)
    client = ChalkClient(own_redis_url, broker_url=broker.url)
    jobs = [ScoringJob(id=f"half-{i}", judge=logged(scorings, f"half-{i}")) for i in range(5)]
    with pytest.raises(QueueUnavailableError) as caught:
        client.submit_batch(jobs, batch_id="b-half")
    left = caught.value.not_queued
    # half-2 went out as the publish failed: given back unless a worker took it already
    assert left in (("half-2", "half-3", "half-4"), ("half-3", "half-4")), left
    assert f"{5 - len(left)} of 5 jobs of batch b-half were submitted" in str(caught.value)

    monkeypatch.undo()
    results = client.submit_batch(jobs, batch_id="b-half").wait(20)
    assert {(r.status, r.attempts) for r in results} == {(JobStatus.SUCCEEDED, 1)}
    assert ends(scorings) == {f"half-{i}": 1 for i in range(5)}
    client.close()


def test_concurrent_submitters_through_a_separate_broker_share_one_scoring(
    own_redis_url, broker, start_worker, scorings
):
    broker.start()
    start_worker(own_redis_url, env={"CHALK_BROKER_URL": broker.url})
    client = ChalkClient(own_redis_url, broker_url=broker.url)
    job = ScoringJob(id="racing", judge=logged(scorings, "racing", sleep_s=0.3))
    results: list[JobResult] = []
    barrier = threading.Barrier(8)

    def submit() -> None:
        barrier.wait()
        results.append(client.submit_and_wait(job, 20))

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(results) == 8 and all(result == results[0] for result in results)
    assert results[0].attempts == 1
    assert ends(scorings) == {"racing": 1}
    client.close()


# 2. Redis out of memory -------------------------------------------------------------


@pytest.fixture
def small_redis(tmp_path: Path) -> Iterator[str]:
    """A redis-server of this test's own, to run out of memory without hurting the others."""
    port = free_port()
    proc = start_redis(port, tmp_path)
    yield f"redis://127.0.0.1:{port}/0"
    stop(proc)


def test_redis_out_of_memory_says_what_was_submitted_and_a_resubmit_scores_every_job(
    small_redis, start_worker, make_client
):
    store = redis.Redis.from_url(small_redis)
    store.config_set("maxmemory", store.info("memory")["used_memory"] + 1_500_000)
    jobs = [ScoringJob(id=f"oom-{i:04d}", judge=AlwaysPassJudge()) for i in range(1200)]
    client = make_client(small_redis)
    with pytest.raises(StoreFullError) as caught:
        client.submit_batch(jobs, batch_id="b-oom")
    error = caught.value
    assert isinstance(error, ChalkError)
    message = str(error)
    assert "out of memory" in message and "maxmemory" in message
    assert "of 1200 jobs of batch b-oom were submitted" in message
    again = "Submitting them again, or the whole batch with submit_batch(jobs, batch_id='b-oom'),"
    assert f"{again} is safe" in message
    assert error.batch_id == "b-oom"
    submitted = 1200 - len(error.not_queued)
    assert 0 < submitted < 1200, message
    assert f"{submitted} of 1200 jobs" in message
    assert store.llen("chalk") == submitted  # every job it counts is in the queue

    store.config_set("maxmemory", 0)
    batch = client.submit_batch(jobs, batch_id="b-oom")
    start_worker(small_redis)
    results = batch.wait(60)
    assert [r.job_id for r in results] == [job.id for job in jobs]
    assert {(r.status, r.attempts) for r in results} == {(JobStatus.SUCCEEDED, 1)}
    assert client.batch("b-oom").job_ids == [job.id for job in jobs]  # listed once
    client.close()


def test_a_redis_error_reaches_the_caller_as_a_chalk_error(own_redis_url, make_client):
    redis.Redis.from_url(own_redis_url).set("chalk:batch:b-odd", "not a list")
    client = make_client(own_redis_url)
    with pytest.raises(StoreRefusedError, match="refused a command"):
        client.batch("b-odd")
    with pytest.raises(QueueUnavailableError, match="cannot reach Redis"):
        make_client(f"redis://127.0.0.1:{free_port()}/0").get("x")


def test_chalk_score_on_a_full_redis_says_so_without_a_traceback(small_redis, tmp_path):
    store = redis.Redis.from_url(small_redis)
    store.config_set("maxmemory", 1)
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text('{"id": "r1", "judge": {"type": "always_pass"}}\n')
    done = chalk(["score", str(rollouts)], small_redis)
    assert done.returncode == 2, done.stderr
    assert "out of memory" in done.stderr and "is safe" in done.stderr
    assert "Traceback" not in done.stderr


# 3. Zero timeouts -------------------------------------------------------------------


def test_a_zero_timeout_returns_results_already_there(client):
    job = ScoringJob(id="zero", judge=AlwaysPassJudge())
    first = client.submit_and_wait(job, 30)
    assert client.submit_and_wait(job, 0) == first
    assert client.job("zero").wait(0) == first
    handle = client.submit(job)
    assert handle.wait(0) == first
    jobs = [ScoringJob(id=f"zero-{i}", judge=AlwaysPassJudge()) for i in range(5)]
    batch = client.submit_batch(jobs)
    finished = batch.wait(30)
    assert client.batch(batch.id).wait(0) == finished
    assert client.batch(batch.id).results(0) == finished
    assert client.submit_batch(jobs).results(0) == finished
    assert [r.job_id for r in client.submit_batch(jobs).as_completed(0)] == [j.id for j in jobs]


def test_a_zero_timeout_on_an_unfinished_job_raises_at_once(redis_url, make_client):
    idle = make_client(redis_url, settings=ChalkSettings(queue="nobody-reads-this"))
    with pytest.raises(ResultTimeout, match="it is queued"):
        idle.submit_and_wait(ScoringJob(id="unfinished", judge=AlwaysPassJudge()), 0)
    with pytest.raises(ResultTimeout, match="1 of 1 jobs"):
        idle.submit_batch([ScoringJob(id="unfinished", judge=AlwaysPassJudge())]).wait(0)


# 4. Waiters leave nothing behind ----------------------------------------------------


def test_looking_at_a_job_leaves_no_waiter_list(client, redis_url):
    client.submit_and_wait(ScoringJob(id="looked-at", judge=AlwaysPassJudge()), 30)
    for _ in range(21):
        handle = client.job("looked-at")
        assert handle.status() is JobStatus.SUCCEEDED
        assert handle.wait(0).status is JobStatus.SUCCEEDED
    assert done_lists(redis_url) == []
    assert status(["looked-at"], redis_url).returncode == 0
    assert done_lists(redis_url) == []


def test_a_long_wait_is_woken_and_its_list_goes_with_it(client, redis_url, scorings):
    job = ScoringJob(id="long", judge=logged(scorings, "long", sleep_s=2.5))
    result = client.submit_and_wait(job, 30)  # longer than one blocking pop
    assert result.status is JobStatus.SUCCEEDED
    assert done_lists(redis_url) == []
    forgotten = client.submit(ScoringJob(id="forgotten", judge=AlwaysPassJudge()))
    assert client.job("forgotten").wait(30).status is JobStatus.SUCCEEDED
    store = redis.Redis.from_url(redis_url)
    left = done_lists(redis_url)  # the handle nobody waited on was told, for a while
    assert left == [f"chalk:done:{forgotten._collector.waiter}".encode()]
    assert 0 < store.ttl(left[0]) <= DONE_TTL_S


def test_a_waiter_whose_announcement_expired_still_gets_the_result(own_redis_url, monkeypatch):
    settings = ChalkSettings(queue="nobody-reads-this")
    client = ChalkClient(own_redis_url, settings=settings)
    handle = client.submit(ScoringJob(id="quiet", judge=AlwaysPassJudge()))
    store = redis.Redis.from_url(own_redis_url)
    # The submitter is told of the result; an hour's wait is still told.
    assert store.hget("chalk:job:quiet", "submitter") == handle._collector.waiter.encode()
    assert store.ttl("chalk:job:quiet") > 3600
    with pytest.raises(ResultTimeout):
        handle.wait(0)
    leases = LeaseStore(store, settings)
    leases.start("quiet", "worker-a")
    leases.finish(JobResult(job_id="quiet", status=JobStatus.SUCCEEDED), "worker-a")
    store.delete(f"chalk:done:{handle._collector.waiter}")  # as if it expired unread
    monkeypatch.setattr(handles_module, "STALE_AFTER_S", 0.0)  # as if long unread
    assert handle.wait(5).status is JobStatus.SUCCEEDED
    assert done_lists(own_redis_url) == []


# 5. A malformed URL -----------------------------------------------------------------


def chalk(args: list[str], redis_url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHALK_")}
    return subprocess.run(
        [sys.executable, "-m", "chalk_client.cli", *args],
        cwd=ROOT,
        env={**env, "CHALK_REDIS_URL": redis_url},
        capture_output=True,
        text=True,
        timeout=60,
    )


def status(args: list[str], redis_url: str) -> subprocess.CompletedProcess[str]:
    return chalk(["status", *args], redis_url)


@pytest.mark.parametrize(
    "url", ["notaurl", "http://127.0.0.1:6379/0", "redis://host:notaport/0", "redis://[::1/0"]
)
def test_a_malformed_redis_url_is_a_configuration_error(url):
    with pytest.raises(ConfigurationError, match="redis://") as caught:
        ChalkClient(url)
    assert "is not a Redis URL" in str(caught.value) and "rediss://" in str(caught.value)
    with pytest.raises(ConfigurationError, match="is not a Redis URL"):
        AsyncChalkClient(url)


@pytest.mark.parametrize("broker", ["notaurl", "http://host:5672//"])
def test_a_malformed_broker_url_is_a_configuration_error_at_once(own_redis_url, broker):
    # kombu would take "notaurl" for an AMQP host and fail only at the first publish.
    for make in (ChalkClient, AsyncChalkClient):
        with pytest.raises(ConfigurationError, match="is not a broker URL"):
            make(own_redis_url, broker_url=broker)


def test_a_malformed_url_hides_its_password():
    with pytest.raises(ConfigurationError) as caught:
        ChalkClient("redis://user:s3cret@host:notaport/0")
    assert "s3cret" not in str(caught.value)


def test_chalk_commands_turn_a_malformed_url_into_a_message(tmp_path):
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text('{"id": "r1", "judge": {"type": "always_pass"}}\n')
    for args in (["status"], ["status", "some-job"], ["score", str(rollouts)]):
        done = chalk(args, "notaurl")
        assert done.returncode == 2, (args, done.stderr)
        assert "is not a Redis URL" in done.stderr and "redis://" in done.stderr
        assert "Traceback" not in done.stderr


def test_a_waiter_told_done_is_woken_by_the_result_of_a_retry(redis_url, client):
    # B submits a job whose result is `failed` (B is told "done"); C retries it before B
    # reads that result: B must get the retry's result, not wait for ever.
    store = redis.Redis.from_url(redis_url)
    parked = ChalkClient(redis_url, settings=ChalkSettings(queue="parked"))  # no worker reads it
    job = ScoringJob(id="done-then-retried", judge=AlwaysPassJudge())
    parked.submit(job)
    store.delete("parked")
    leases = LeaseStore(redis.Redis.from_url(redis_url), client.settings)
    start = leases.start(job.id, "a worker")
    failed = JobResult(job_id=job.id, status=JobStatus.FAILED, error="boom", attempts=1)
    assert start.outcome == "start" and leases.finish(failed, "a worker")

    told_done = client.submit(job)  # B
    retried = parked.submit(job, retry_failed=True)  # C: its message waits in "parked"
    outcome: dict[str, object] = {}
    waiting = threading.Thread(target=lambda: outcome.update(b=told_done.wait(30)))
    waiting.start()
    store.lpush(client.settings.queue, pop_waiting(store, "parked") or b"")  # C's reaches it
    assert retried.wait(30).status is JobStatus.SUCCEEDED
    waiting.join(35)
    assert isinstance(outcome.get("b"), JobResult)
    assert outcome["b"].status is JobStatus.SUCCEEDED  # type: ignore[attr-defined]


def test_a_retry_refused_by_a_full_redis_changes_nothing(own_redis_url, make_client):
    store = redis.Redis.from_url(own_redis_url)
    settings = ChalkSettings(queue="no-worker-here")
    client = make_client(own_redis_url, settings=settings)
    job = ScoringJob(id="retry-when-full", judge=AlwaysPassJudge())
    client.submit(job)
    store.delete("no-worker-here")
    leases = LeaseStore(redis.Redis.from_url(own_redis_url), settings)
    leases.start(job.id, "a worker")
    leases.finish(JobResult(job_id=job.id, status=JobStatus.FAILED, error="boom"), "a worker")
    store.config_set("maxmemory-policy", "noeviction")
    store.config_set("maxmemory", 1)
    try:
        with pytest.raises(StoreFullError) as caught:
            client.submit(job, retry_failed=True)
        assert caught.value.not_queued == (job.id,)
        assert client.get(job.id).status is JobStatus.FAILED  # the failed result is kept
        assert store.llen("no-worker-here") == 0  # and nothing was queued
    finally:
        store.config_set("maxmemory", 0)
    assert client.submit(job, retry_failed=True).job_id == job.id
    assert store.llen("no-worker-here") == 1
