"""Chalk through Sentinel with passwords on both sides: the master's and the sentinels' own.

(The failover itself is ``test_failover.py``.)
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from processes import need
from sentinel_cluster import SentinelCluster

from chalk_client import ChalkClient, ScoringJob
from chalk_client.cluster.connection import connect
from chalk_client.judges import RegexJudge
from chalk_client.transcript import Message, Transcript

PASSWORD = "p@ss/word"  # percent-encoded in the URL, as in any Redis URL


def job(job_id: str) -> ScoringJob:
    said = Transcript(messages=[Message(role="assistant", content="the answer: 4")])
    return ScoringJob(id=job_id, judge=RegexJudge([r"answer: \d"]), transcript=said)


@pytest.mark.slow
def test_a_master_and_sentinels_behind_passwords_of_their_own(tmp_path: Path) -> None:
    if shutil.which("redis-server") is None:
        need("redis-server")
    with SentinelCluster(
        tmp_path, master_name="grading", password=PASSWORD, sentinel_password="watch"
    ) as cluster:
        url = cluster.url(3)
        assert "sentinel_password=watch" in url and "p%40ss%2Fword" in url
        with ChalkClient(url) as client:
            client.submit(job("guarded"))
        store = connect(url)
        with store:
            assert store.exists("chalk:job:guarded")  # in database 3 of the master
            assert store.info("replication")["role"] == "master"
