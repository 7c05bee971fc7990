"""Large jobs: submissions travel from Redis to the worker in pieces, never as one reply;
long transcripts (stored compressed) are scored whole."""

from __future__ import annotations

import os
import random

import redis
from support import say

from chalk_client import JobStatus, ScoringJob, Submission
from chalk_client.judges import ExecutableJudge, RegexJudge

EXAMPLE = ["{python}", "-m", "tasks.example_task.scoring_script", "{submission}", "out.txt"]


def big_submission(answer: str) -> Submission:
    # Random bytes do not compress: the archive is well over the 1 MiB inline limit.
    padding = os.urandom(3 << 20).hex()
    return Submission.from_files({"answer.txt": answer, "padding.txt": padding})


def test_a_long_transcript_is_scored_whole(client):
    words = random.Random(7).choices(["tool", "call", "file", "read", "ok", "diff"], k=40_000)
    text = " ".join(words)
    jobs = [
        ScoringJob(id=f"long-{end}", transcript=say(text + end), judge=RegexJudge([r"FINAL$"]))
        for end in (" FINAL", " not final")
    ]
    results = client.submit_batch(jobs).results(timeout=60)  # stored compressed
    assert [result.score for result in results] == [1.0, 0.0]


def test_a_large_submission_is_streamed_to_the_worker_and_scored(client):
    right = ScoringJob(
        id="large-right",
        judge=ExecutableJudge(EXAMPLE),
        submission=big_submission("3.12.11"),
        submission_paths=["answer.txt"],
    )
    wrong = right.model_copy(update={"id": "large-wrong", "submission": big_submission("3.9")})
    assert len(right.submission.archive_bytes()) > 2 << 20
    results = client.submit_batch([right, wrong]).results(timeout=120)
    assert [(r.status, r.score) for r in results] == [
        (JobStatus.SUCCEEDED, 1.0),
        (JobStatus.SUCCEEDED, 0.0),
    ]


def test_download_copies_an_archive_in_pieces_and_reports_one_that_is_gone(redis_url, tmp_path):
    from chalk_client import ChalkSettings
    from chalk_worker.cluster.leases import DOWNLOAD_PIECE_BYTES, LeaseStore

    store = redis.Redis.from_url(redis_url)
    data = os.urandom(2 * DOWNLOAD_PIECE_BYTES + 12345)
    store.set("chalk:blob:abc", data)
    leases = LeaseStore(store, ChalkSettings())
    assert leases.download("abc", tmp_path / "copy") is True
    assert (tmp_path / "copy").read_bytes() == data
    store.delete("chalk:blob:abc")
    assert leases.download("abc", tmp_path / "gone") is False
