"""No worker takes the queue: said at once, again while none does, and when one comes."""

from __future__ import annotations

import pytest

from chalk_client import ChalkSettings, workers
from chalk_client.cluster.presence import WorkerPresence
from chalk_client.workers import WorkerWatch


def presence(node: str, queue: str = "chalk") -> WorkerPresence:
    return WorkerPresence(
        node=node,
        host="h",
        pid=1,
        pool="threads",
        concurrency=64,
        queue=queue,
        started=0.0,
        seen=0.0,
        version="0",
        sandbox=[],
    )


class Cluster:
    """A ``ChalkClient`` as ``WorkerWatch`` asks it: the live workers, by turns."""

    def __init__(self, answers: list[list[WorkerPresence]]) -> None:
        self.answers = answers
        self.redis_url = "redis://:secret@10.0.0.5:6379/0"
        self.settings = ChalkSettings(queue="grading")

    def workers(self) -> list[WorkerPresence]:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def test_no_worker_is_said_at_once_then_again_then_the_worker_is_greeted(monkeypatch):
    monkeypatch.setattr(workers, "REMIND_S", 0.0)
    monkeypatch.setattr(workers, "CHECK_S", 3600.0)  # the thread never looks: we do
    said: list[str] = []
    cluster = Cluster([[], [], [presence("w1@h", "grading")]])
    with WorkerWatch(
        cluster.workers, cluster.redis_url, "grading", said.append, lambda: 7
    ) as watch:
        assert len(said) == 1
        assert "no live worker takes jobs from queue 'grading'" in said[0]
        assert "redis://:***@10.0.0.5:6379/0" in said[0] and "secret" not in said[0]
        assert "`chalk worker`" in said[0]
        watch.check()
        assert "still no live worker after" in said[1] and "7 job(s) waiting" in said[1]
        watch.check()
        assert said[2] == "chalk score: a worker is live now (w1@h); scoring goes on"
        watch.check()
        assert len(said) == 3  # nothing more to say while one is live


def test_a_cluster_with_a_worker_is_not_warned_about():
    said: list[str] = []
    cluster = Cluster([[presence("w1@h")]])
    with WorkerWatch(cluster.workers, cluster.redis_url, "chalk", said.append, lambda: 0):
        pass
    assert said == []


@pytest.mark.parametrize("queue", ["chalk", "other"])
def test_only_workers_of_the_client_s_queue_count(queue):
    live = [presence("a@h", "chalk"), presence("b@h", "other")]
    assert [w.node for w in workers.on_queue(live, queue)] == ["a@h" if queue == "chalk" else "b@h"]
