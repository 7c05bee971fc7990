"""A worker's start: the sandbox probe's report in its log, and strict mode's refusal."""

from __future__ import annotations

import time

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
