"""``CHALK_REDIS_WAIT_REPLICAS``: a submit counts only once replicas have it, and says so if not."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sentinel_cluster import SentinelCluster

from chalk_client import ChalkClient, ChalkSettings, JobStatus, ScoringJob
from chalk_client.errors import QueueError
from chalk_client.judges import RegexJudge
from chalk_client.transcript import Message, Transcript


def health(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``chalk health`` run with ``env`` alone."""
    return subprocess.run(
        [sys.executable, "-m", "chalk_client.cli", "health"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def jobs(prefix: str, count: int = 3) -> list[ScoringJob]:
    said = Transcript(messages=[Message(role="assistant", content="the answer: 4")])
    return [
        ScoringJob(id=f"{prefix}-{i}", judge=RegexJudge([r"answer: \d"]), transcript=said)
        for i in range(count)
    ]


def test_a_submit_no_replica_confirmed_raises_and_sending_again_is_safe(make_redis) -> None:
    server = make_redis()
    settings = ChalkSettings(redis_wait_replicas=1, redis_wait_timeout_s=0.2)
    with ChalkClient(server.url, settings=settings) as client:
        with pytest.raises(QueueError, match="0 of the 1 replica") as caught:
            client.submit_batch(jobs("lonely"), batch_id="b")
        said = str(caught.value)
        assert "were queued" in said and "CHALK_REDIS_WAIT_REPLICAS" in said and "safe" in said
        assert caught.value.not_queued == () and caught.value.batch_id == "b"
        with pytest.raises(QueueError):  # still no replica: still not confirmed
            client.submit_batch(jobs("lonely"), batch_id="b")
    with ChalkClient(server.url) as client:  # without waiting: the jobs are there, once each
        batch = client.submit_batch(jobs("lonely"), batch_id="b")
        assert batch.total == 3
        assert {client.job(job.id).status() for job in jobs("lonely")} == {JobStatus.QUEUED}


@pytest.mark.slow
def test_with_a_replica_submits_wait_for_it_and_health_counts_it(tmp_path) -> None:
    with SentinelCluster(tmp_path / "redis") as cluster:
        url = cluster.url()
        settings = ChalkSettings(redis_wait_replicas=1, redis_wait_timeout_s=5)
        with ChalkClient(url, settings=settings) as client:
            batch = client.submit_batch(jobs("kept"))
            assert batch.total == 3
        env = {"CHALK_REDIS_URL": url, "CHALK_REDIS_WAIT_REPLICAS": "2", "PATH": ""}
        shown = health(env)
        assert "replication: 1 replica(s) online, submits and results wait for 2" in shown.stdout
        assert "CHALK_REDIS_WAIT_REPLICAS=2 but 1 replica(s) are online" in shown.stdout
        assert "sentinels: 3 of 3 answer" in shown.stdout
        assert shown.returncode == 1

        replica = next(node for node in cluster.data_nodes if node.port != cluster.master_port)
        env["CHALK_REDIS_URL"] = f"redis://127.0.0.1:{replica.port}/0"
        env["CHALK_REDIS_WAIT_REPLICAS"] = "0"
        shown = health(env)
        assert "PROBLEM: this Redis is a read-only replica" in shown.stdout, shown.stdout
