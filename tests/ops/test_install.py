"""A client-only install: ``pip install chalk-queue`` without the ``worker`` extra.

It holds the models and ``ChalkClient`` and submits to a cluster, with neither
Celery, Flower, openai, psutil nor prometheus_client installed; what needs the
worker says which extra to install, and how, instead of failing on an import.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from processes import free_port, start_redis, stop

ROOT = Path(__file__).resolve().parents[2]
WORKER_ONLY = ("celery", "flower", "openai", "psutil", "prometheus-client")

CLIENT = """
import sys
import chalk_client
from chalk_client import Message, ScoringJob, Transcript
from chalk_client.judges import RegexJudge

said = Transcript(messages=[Message(role="assistant", content="answer: 42")])
job = ScoringJob(id="light", transcript=said, judge=RegexJudge(["42"]))
heavy = sorted({name.split(".")[0] for name in sys.modules} & {"kombu", "redis"})
from chalk_client import ChalkClient
with ChalkClient(sys.argv[1]) as client:
    client.submit(job)
print(heavy)
"""


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with this project installed as ``pip install chalk-queue`` would."""
    base = tmp_path_factory.mktemp("client-install")
    source = base / "source"
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    for name in filter(None, listed):
        if (ROOT / name).is_file():  # a file deleted but not yet committed is listed too
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    installed = subprocess.run(
        [venv / "bin" / "pip", "install", "--quiet", str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    return venv


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_client_only_install_submits_and_names_the_extra_for_the_rest(client_venv, tmp_path):
    listed = subprocess.run(
        [client_venv / "bin" / "pip", "list", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    names = {package["name"].lower() for package in json.loads(listed.stdout)}
    assert "chalk-queue" in names
    assert not names & set(WORKER_ONLY), names & set(WORKER_ONLY)

    port = free_port()
    server = start_redis(port, tmp_path)
    try:
        url = f"redis://127.0.0.1:{port}/0"
        submitted = subprocess.run(
            [client_venv / "bin" / "python", "-c", CLIENT, url],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert submitted.returncode == 0, submitted.stderr[-3000:]
        assert submitted.stdout.strip() == "[]"  # the models alone load neither kombu nor redis
        assert redis.Redis(port=port).llen("chalk") == 1  # queued for a worker elsewhere
    finally:
        stop(server)

    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text(json.dumps({"id": "one", "judge": {"type": "always_pass"}}) + "\n")
    for argv, what in (
        (["score", str(rollouts)], "scoring without a cluster"),
        (["worker"], "chalk worker"),
        (["flower"], "chalk flower"),
    ):
        done = subprocess.run(
            [client_venv / "bin" / "chalk", *argv],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        )
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert f"{what} needs the worker's packages" in done.stderr
        assert "pip install 'chalk-queue[worker]'" in done.stderr
        assert "Traceback" not in done.stderr
