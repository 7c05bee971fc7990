"""Redis users per role (``chalk acl``) on a real Redis: each role does its part, no more.

One private redis-server for the module, given the four users exactly as
``chalk acl`` prints them, through ``redis-cli`` as an operator applies them; its
``default`` user stays the tests' admin. A ``chalk worker`` under the worker's
user scores what a client under the client's user submits, cancels and submits
again; ``chalk status`` and ``chalk health`` run as the monitor (in this process),
Flower as ``flower``;
Redis's ACL log then holds no refusal but the monitor's ``CONFIG GET`` (``chalk
health`` tries it, and says it could not). Then each user is refused what its
role does not need, where the key layout lets Redis tell the keys apart.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest
import redis
from processes import WorkerFactory, free_port, need, start_redis, stop, wait_port
from redis.backoff import NoBackoff
from redis.retry import Retry
from support import say, wait_until

from chalk_client import ChalkClient, ChalkSettings, JobStatus, ScoringJob, Submission, cli
from chalk_client.cluster import keys
from chalk_client.cluster.acl import Role
from chalk_client.cluster.lanes import lane_for
from chalk_client.cluster.script import SCRIPTS
from chalk_client.errors import StoreRefusedError
from chalk_client.judges import CustomJudge, RegexJudge

ROOT = Path(__file__).resolve().parents[2]
PASSWORDS = {role: f"{role}-pw-{os.getpid()}" for role in Role}


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHALK_", "FLOWER_"))}
    return {**env, **extra}


def chalk(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chalk_client.cli", *args],
        capture_output=True,
        text=True,
        env=clean_env(**env),
        cwd=ROOT,
        timeout=120,
    )


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A redis-server of this module's, with the users of ``chalk acl`` applied."""
    for program in ("redis-server", "redis-cli"):
        if shutil.which(program) is None:
            need(program)
    port = free_port()
    # DEBUG on, as a developer's Redis has it: only the ACL may refuse it then.
    proc = start_redis(
        port, tmp_path_factory.mktemp("acl-redis"), args=("--enable-debug-command", "yes")
    )
    try:
        variables = {f"ACL_TEST_{role.upper()}": password for role, password in PASSWORDS.items()}
        flags = [f"--password-env={role}=ACL_TEST_{role.upper()}" for role in Role]
        printed = chalk("acl", *flags, **variables)
        assert printed.returncode == 0 and printed.stderr == "", printed.stderr
        lines = printed.stdout.splitlines()
        assert len(lines) == 4 and all(line.startswith("ACL SETUSER chalk-") for line in lines)
        applied = subprocess.run(
            ["redis-cli", "-p", str(port)],
            input=printed.stdout,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert applied.stdout.split() == ["OK"] * 4, applied.stdout + applied.stderr
        yield port
    finally:
        stop(proc)


def url(port: int, role: Role) -> str:
    return f"redis://chalk-{role}:{PASSWORDS[role]}@127.0.0.1:{port}/0"


@pytest.fixture
def admin(port: int) -> Iterator[redis.Redis]:
    """The ``default`` user; the ACL log emptied before the test."""
    client = redis.Redis(port=port)
    client.acl_log_reset()
    yield client
    client.close()


def refusals(admin: redis.Redis) -> list[tuple[str, str, str]]:
    """What Redis refused since the log was emptied: (user, command or key, context)."""
    return sorted(
        {
            (entry["username"], entry["object"], entry["context"])
            for entry in admin.acl_log(count=1000)
        }
    )


def user(port: int, role: Role) -> redis.Redis:
    return redis.Redis.from_url(url(port, role))


def refused(call: Callable[[], object]) -> str:
    """The NOPERM error ``call`` raises (it must raise one)."""
    with pytest.raises(redis.exceptions.NoPermissionError) as caught:
        call()
    return str(caught.value)


def get_page(address: str) -> bytes:
    with urllib.request.urlopen(address, timeout=10) as reply:
        assert reply.status == 200
        return bytes(reply.read())


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``chalk ARGS`` in this process: its exit status and everything it printed."""
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out + err


@pytest.mark.slow
def test_each_role_does_its_part_under_its_own_user(port, admin, tmp_path, monkeypatch, capsys):
    workers = WorkerFactory(tmp_path)
    flower = None
    client = ChalkClient(url(port, Role.CLIENT), settings=ChalkSettings())
    try:
        worker = workers(url(port, Role.WORKER), concurrency=4)
        result = client.submit_and_wait(
            ScoringJob(
                id="acl-one",
                transcript=say("the answer is 42"),
                judge=RegexJudge(["42"]),
                submission=Submission.from_files({"answer.txt": "42"}),
            ),
            timeout=30,
        )
        assert result.status is JobStatus.SUCCEEDED and result.score == 1.0, result.error
        assert [w.node.split("@")[0] for w in client.workers()] == [worker.name]
        # A batch with a callback (registered by the client, looked at by the worker, read
        # by the monitor), and one whose running job the client cancels.
        batch = client.submit_batch(
            [
                ScoringJob(id=f"acl-b{i}", transcript=say("42"), judge=RegexJudge(["42"]))
                for i in range(3)
            ],
            callback_url="http://127.0.0.1:9/hook",
        )
        batch.wait(30)
        assert batch.summary().succeeded == 3
        log = tmp_path / "scorings.log"
        gated_job = ScoringJob(
            id="acl-gated",
            judge=CustomJudge(
                "test_log", {"log": str(log), "key": "acl-gated", "gate": str(tmp_path / "gate")}
            ),
        )
        gated = client.submit_batch([gated_job])
        wait_until(lambda: log.exists() and "start" in log.read_text(), 20, "the gated job")
        assert gated.cancel().cancelled == 1
        assert gated.wait(10)[0].status is JobStatus.CANCELLED
        (tmp_path / "gate").touch()  # the judge's thread ends too: the worker stops at once

        monkeypatch.setenv("CHALK_REDIS_URL", url(port, Role.MONITOR))
        code, status = run_cli(capsys, "status")
        assert code == 0 and f"batch {gated.id}: cancelled" in status
        code, of_batch = run_cli(capsys, "status", batch.id)
        assert code == 0 and "succeeded 3" in of_batch and "callback: " in of_batch
        code, of_job = run_cli(capsys, "status", "acl-one")
        assert code == 0 and "job acl-one: succeeded" in of_job
        code, health = run_cli(capsys, "health")
        assert code == 0, health
        assert "workers: 1 alive" in health
        assert "RDB snapshots unknown (CONFIG refused)" in health
        again = client.submit(gated_job, retry_failed=True)  # the cancelled result goes
        assert again.wait(30).status is JobStatus.SUCCEEDED

        flower_port = free_port()
        with (tmp_path / "flower.log").open("wb") as out:
            flower = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "chalk_client.cli",
                    "flower",
                    f"--port={flower_port}",
                    "--address=127.0.0.1",
                ],
                env=clean_env(
                    CHALK_REDIS_URL=url(port, Role.FLOWER), FLOWER_UNAUTHENTICATED_API="true"
                ),
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        assert wait_port(flower_port, 30), (tmp_path / "flower.log").read_text()
        home = f"http://127.0.0.1:{flower_port}"
        # Its own question on the remote-control channel, answered by the worker.
        wait_until(lambda: json.loads(get_page(home + "/api/workers")), 20, "Flower's workers")
        assert b"chalk" in get_page(home + "/broker")  # the queue's length, read
        client.submit_and_wait(
            ScoringJob(id="acl-seen", transcript=say("42"), judge=RegexJudge(["42"])), timeout=30
        )
        wait_until(lambda: b"acl-seen" in get_page(home + "/api/tasks"), 20, "the task's events")
    finally:
        client.close()
        if flower is not None:
            stop(flower)
        workers.stop_all()
    assert refusals(admin) == [("chalk-monitor", "config|get", "toplevel")]


ADMIN_COMMANDS = [
    ("FLUSHALL",),
    ("FLUSHDB",),
    ("CONFIG", "GET", "maxmemory"),
    ("CONFIG", "SET", "maxmemory", "1"),
    ("DEBUG", "SLEEP", "0"),
    ("KEYS", "*"),
    ("SCRIPT", "FLUSH"),
    ("FUNCTION", "FLUSH"),
    ("ACL", "SETUSER", "intruder", "on", "nopass", "~*", "+@all"),
    ("CLIENT", "KILL", "TYPE", "normal"),
    ("MONITOR",),
]


@pytest.mark.parametrize("role", list(Role))
def test_no_role_may_run_an_admins_command(port, admin, role):
    with user(port, role) as client:
        assert client.ping()
        for command in ADMIN_COMMANDS:
            refused(partial(client.execute_command, *command))
    assert {entry[0] for entry in refusals(admin)} == {f"chalk-{role}"}
    assert len(refusals(admin)) == len(ADMIN_COMMANDS)


QUEUE = ChalkSettings().queue
CONSUMER = keys.consumer_id(QUEUE, "w1@host", 1, "t", 0)


def test_the_monitor_reads_and_writes_nothing(port, admin):
    admin.set(keys.result("acl-r"), "{}")
    admin.hset(keys.job("acl-j"), "attempts", "1")
    with user(port, Role.MONITOR) as monitor:
        assert monitor.get(keys.result("acl-r")) == b"{}"
        assert monitor.hget(keys.job("acl-j"), "attempts") == b"1"
        assert monitor.llen(QUEUE) == 0 and monitor.llen(keys.held(CONSUMER)) == 0
        for write in (
            lambda: monitor.set(keys.result("acl-r"), "forged"),
            lambda: monitor.delete(keys.result("acl-r")),
            lambda: monitor.hset(keys.job("acl-j"), "owner", "me"),
            lambda: monitor.lpush(QUEUE, "~"),
            lambda: monitor.lpush(keys.held(CONSUMER), "m"),
            lambda: monitor.zadd(keys.RUNNING, {"acl-j": 1}),
            lambda: monitor.set(keys.worker("w1@host"), "{}"),
            lambda: monitor.publish("/0.celery.pidbox", "shutdown"),
            lambda: monitor.get(keys.blob("0" * 64)),  # a submission: not its to read
            lambda: monitor.get(keys.verdict("0" * 64)),
        ):
            refused(write)
        # Not one script, not even one that only reads.
        script = SCRIPTS[0]
        admin.script_load(script.text)
        refused(lambda: monitor.evalsha(script.sha, 0))
    admin.delete(keys.result("acl-r"), keys.job("acl-j"))


def test_a_role_refused_a_command_is_told_which_users_to_give(port):
    monitor = ChalkClient(url(port, Role.MONITOR), settings=ChalkSettings())
    with monitor, pytest.raises(StoreRefusedError) as refused:
        monitor.submit(ScoringJob(id="acl-never", judge=RegexJudge(["x"])))
    message = str(refused.value)
    assert "does not let the user of CHALK_REDIS_URL do this: this user has no" in message
    assert "`chalk acl`" in message


def test_a_client_cannot_touch_what_only_workers_do(port, admin):
    with user(port, Role.CLIENT) as client:
        assert client.lpush(lane_for(QUEUE, "normal", "acl-b"), "m") == 1  # its own queue
        assert client.set(keys.blob("1" * 64), b"archive")  # writes archives...
        refused(lambda: client.get(keys.blob("1" * 64)))  # ...but reads no one's back
        for touch in (
            lambda: client.lpush(keys.held(CONSUMER), "m"),
            lambda: client.lrange(keys.held(CONSUMER), 0, -1),
            lambda: client.zadd(keys.CONSUMERS, {CONSUMER: 1}),
            lambda: client.zadd(keys.TAKEN, {"lane": 1}),
            lambda: client.set(keys.RECONCILER, "me"),
            lambda: client.set(keys.worker("w1@host"), "{}"),
            lambda: client.set(keys.verdict("0" * 64), "{}"),
            lambda: client.set(keys.llm_rate("0" * 16), "0"),
            lambda: client.sadd("_kombu.binding.chalk", "x"),
            lambda: client.hset("unacked", "tag", "m"),
            lambda: client.lpush("w1@host.celery.pidbox", "m"),
            lambda: client.publish("/0.celery.pidbox", "shutdown"),
            lambda: client.lpush(lane_for("other-queue", "normal", "b"), "m"),  # another queue
        ):
            refused(touch)
    admin.delete(lane_for(QUEUE, "normal", "acl-b"), keys.blob("1" * 64))


def test_a_worker_tells_waiters_but_reads_their_lists_and_batches_only_as_allowed(port, admin):
    admin.rpush(keys.batch("acl-b"), "j1")
    with user(port, Role.WORKER) as worker:
        assert worker.rpush(keys.done("w-acl"), "j1") == 1
        refused(lambda: worker.lrange(keys.done("w-acl"), 0, -1))
        assert worker.lrange(keys.batch("acl-b"), 0, -1) == [b"j1"]
        refused(lambda: worker.rpush(keys.batch("acl-b"), "forged"))
        refused(lambda: worker.zadd(keys.BATCHES, {"acl-b": 1}))
    admin.delete(keys.done("w-acl"), keys.batch("acl-b"))


def test_flower_touches_only_kombus_keys_of_its_own(port, admin):
    admin.set(keys.result("acl-r"), "{}")
    with user(port, Role.FLOWER) as flower:
        assert flower.llen(QUEUE) == 0
        assert flower.sadd("_kombu.binding.celeryev", "x") == 1
        for touch in (
            lambda: flower.get(keys.result("acl-r")),
            lambda: flower.set(keys.result("acl-r"), "forged"),
            lambda: flower.hget(keys.job("acl-j"), "job"),
            lambda: flower.lpush(QUEUE, "~"),
            lambda: flower.sadd("_kombu.binding.chalk", "x"),  # where the tasks go: not its
            lambda: flower.lpush("w1@host.celery.pidbox", "m"),
        ):
            refused(touch)
    admin.delete(keys.result("acl-r"), "_kombu.binding.celeryev")


def test_applied_again_the_lines_replace_a_users_permissions(port, admin, monkeypatch, capsys):
    admin.execute_command("ACL", "SETUSER", "chalk-monitor", "~*", "+@all", ">extra")
    monkeypatch.setenv("MONITOR_PW", "again")
    code, printed = run_cli(capsys, "acl", "--role=monitor", "--password-env=MONITOR_PW")
    try:
        assert code == 0 and admin.execute_command(*split(printed)) == b"OK"
        once = Retry(NoBackoff(), 0)  # a refused password is not tried again
        with redis.Redis(
            port=port, username="chalk-monitor", password="again", retry=once
        ) as monitor:
            refused(lambda: monitor.set("anything", "1"))
            with pytest.raises(redis.AuthenticationError):  # the old password went too
                monitor.execute_command("AUTH", "chalk-monitor", "extra")
    finally:
        monkeypatch.setenv("MONITOR_PW", PASSWORDS[Role.MONITOR])
        _, restored = run_cli(capsys, "acl", "--role=monitor", "--password-env=MONITOR_PW")
        assert admin.execute_command(*split(restored)) == b"OK"


def split(line: str) -> list[str]:
    """An ``ACL SETUSER`` line's words (``chalk acl`` quotes none for these queues)."""
    assert '"' not in line
    return line.split()
