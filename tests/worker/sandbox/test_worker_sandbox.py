"""A worker's start: the sandbox probe's report in its log, and strict mode's refusal."""

from __future__ import annotations

import time

from chalk_client import ChalkClient, JobStatus, ScoringJob, Transcript, Verdict
from chalk_client.judges import TestsJudge
from chalk_client.transcript import Message
from chalk_worker.sandbox import detect_layers


def test_the_worker_logs_each_sandbox_layer_at_start(redis_url, start_worker):
    worker = start_worker(redis_url)
    text = worker.text()
    for name in detect_layers().available:
        assert f"sandbox layer {name}: on" in text
    for name in detect_layers().missing:
        assert f"sandbox layer {name}: OFF" in text


def test_a_strict_worker_refuses_to_start_without_a_required_layer(redis_url, start_worker):
    worker = start_worker(redis_url, env={"CHALK_SANDBOX_REQUIRE": "moat"}, wait=False)
    deadline = time.monotonic() + 30
    while worker.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert worker.proc.returncode == 2
    assert "chalk worker refuses to start" in worker.text()
    assert "unknown sandbox layer" in worker.text()


def test_a_worker_builds_and_runs_programs_of_the_tests_judge(redis_url, shared_worker):
    # Through the queue: the build, each test's verdict, CPU time and memory, back from Redis.
    code = "#include <iostream>\nint main(){long a,b; std::cin>>a>>b; std::cout<<a+b<<'\\n';}"
    said = Transcript(messages=[Message(role="assistant", content=f"```cpp\n{code}\n```")])
    tests = [{"stdin": "1 2\n", "stdout": "3\n"}, {"stdin": "5 7\n", "stdout": "13\n"}]
    job = ScoringJob(transcript=said, judge=TestsJudge(tests=tests))
    with ChalkClient(redis_url) as client:
        result = client.submit_and_wait(job, timeout=120)
    assert result.status is JobStatus.SUCCEEDED, result.error
    assert result.score == 0.5 and result.scoring is not None
    assert result.scoring.compile is not None and result.scoring.compile.ok
    assert result.scoring.tests is not None
    assert [t.verdict for t in result.scoring.tests] == [Verdict.ACCEPTED, Verdict.WRONG_ANSWER]
    assert all(t.cpu_s is not None and t.memory_mb is not None for t in result.scoring.tests)
