"""Redis Sentinel for real: the master killed mid-batch, a replica promoted, nothing lost.

A master, a replica and three sentinels (``redis-server --sentinel``), two
``chalk worker`` processes (one at the default 64 threads, one at 4) and a
waiting client, all given the ``sentinel://`` URL and
``CHALK_REDIS_WAIT_REPLICAS=1``. Once a quarter of the batch is scored the
master gets SIGKILL; the sentinels promote the replica, and without anyone's
help the workers go on scoring and the client goes on receiving results. Every
job must end with exactly one result, the right score, received once by the
client, and neither worker may stop.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sentinel_cluster import SentinelCluster

from chalk_client import ChalkClient, ChalkSettings, JobResult, JobStatus, ScoringJob, Submission
from chalk_client.cluster.connection import connect
from chalk_client.judges import ExecutableJudge, RegexJudge
from chalk_client.transcript import Message, Transcript

JOBS = 600
SCRIPT = (
    "import json, sys\n"
    "n = int(open(sys.argv[1]).read())\n"
    "json.dump({'score': n % 2, 'metadata': {}}, open(sys.argv[2], 'w'))\n"
)
WAITING = {"CHALK_REDIS_WAIT_REPLICAS": "1", "CHALK_REDIS_WAIT_TIMEOUT_S": "0.5"}


def known_jobs() -> list[tuple[ScoringJob, float]]:
    """Regex jobs and short sandboxed scripts, each with the score it must get."""
    made = []
    for i in range(JOBS):
        if i % 3 == 2:
            job = ScoringJob(
                id=f"f-{i:04d}",
                judge=ExecutableJudge(["{python}", "-c", SCRIPT, "{submission}", "out.json"]),
                submission=Submission.from_files({"n.txt": str(i)}),
                submission_paths=["n.txt"],
            )
        else:
            said = f"the answer: {i}" if i % 2 else "no idea"
            job = ScoringJob(
                id=f"f-{i:04d}",
                judge=RegexJudge([r"answer: \d+"]),
                transcript=Transcript(messages=[Message(role="assistant", content=said)]),
            )
        made.append((job, float(i % 2)))
    return made


class Receiver(threading.Thread):
    """The client: submits the batch, then takes every result as it comes."""

    def __init__(self, url: str, jobs: list[ScoringJob]) -> None:
        super().__init__(daemon=True)
        settings = ChalkSettings(redis_wait_replicas=1, redis_wait_timeout_s=0.5)
        self.client = ChalkClient(url, settings=settings)
        self.jobs = jobs
        self.received: list[JobResult] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            batch = self.client.submit_batch(self.jobs, batch_id="failover")
            for result in batch.as_completed(timeout=240):
                self.received.append(result)
        except BaseException as exc:
            self.error = exc


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_master_killed_mid_batch_loses_nothing(tmp_path, start_worker) -> None:
    began = time.monotonic()
    with SentinelCluster(tmp_path / "redis") as cluster:
        url = cluster.url()
        workers = [
            start_worker(url, concurrency=None, env={"CHALK_LEASE_S": "5", **WAITING}),
            start_worker(url, concurrency=4, env={"CHALK_LEASE_S": "5", **WAITING}),
        ]
        made = known_jobs()
        expected = {job.id: score for job, score in made}
        receiver = Receiver(url, [job for job, _ in made])
        receiver.start()

        deadline = time.monotonic() + 120
        while len(receiver.received) < JOBS // 4:
            assert receiver.is_alive(), receiver.error
            assert time.monotonic() < deadline, f"{len(receiver.received)} results in 120 s"
            time.sleep(0.05)
        old = cluster.master_port
        kill_s = time.monotonic() - began
        cluster.kill_master()
        killed_at = len(receiver.received)
        cluster.wait_for_failover(timeout_s=30)
        promoted_s = time.monotonic() - began
        assert cluster.master_port != old

        receiver.join(240)
        done_s = time.monotonic() - began
        assert receiver.error is None, repr(receiver.error)
        assert not receiver.is_alive(), f"{len(receiver.received)} of {JOBS} results received"

        ids = [result.job_id for result in receiver.received]
        assert sorted(ids) == sorted(expected), "each job received exactly once"
        wrong = {
            r.job_id: (r.status, r.score, r.error)
            for r in receiver.received
            if r.status is not JobStatus.SUCCEEDED or r.score != expected[r.job_id]
        }
        assert not wrong, f"{len(wrong)} wrong results, e.g. {list(wrong.items())[:3]}"

        # What the promoted master keeps: one result per job, the same as received.
        store: Any = connect(url)
        stored = store.mget([f"chalk:result:{job_id}" for job_id in expected])
        assert all(raw is not None for raw in stored)
        assert {JobResult.model_validate_json(raw).job_id for raw in stored} == set(expected)

        for worker in workers:
            assert worker.proc.poll() is None, worker.text()[-3000:]
            assert "Unrecoverable error" not in worker.text(), worker.text()[-3000:]
        receiver.client.close()
        start_worker.stop_all()  # before Redis stops: they would wait for it
        print(
            f"\nfailover: {JOBS} jobs, master killed after {killed_at} results; "
            f"all received once, right, and stored on the promoted replica; killed at "
            f"{kill_s:.1f} s, replica promoted at {promoted_s:.1f} s, all done at {done_s:.1f} s"
        )
