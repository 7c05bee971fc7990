"""``chalk acl``: the lines it prints and the options it takes (no Redis needed).

That Redis takes these lines, and that each user can do its part and no more,
is in ``tests/ops/test_acl.py``.
"""

from __future__ import annotations

import hashlib
import os
import shlex

import pytest

from chalk_client import cli
from chalk_client.cluster.acl import PASSWORD_PLACEHOLDER, Role


@pytest.fixture
def chalk_acl(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    """``chalk acl ARGS`` in this process: (exit status, stdout, stderr)."""
    for key in list(os.environ):
        if key.startswith("CHALK_"):
            monkeypatch.delenv(key)

    def run(*args: str) -> tuple[int, str, str]:
        try:
            code = cli.main(["acl", *args])
        except SystemExit as exc:  # argparse refusing a flag
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    return run


def words(line: str) -> list[str]:
    """A printed line's words, as ``redis-cli`` (like a shell) splits them."""
    return shlex.split(line)


def test_one_line_per_role_with_a_placeholder_redis_refuses(chalk_acl):
    code, out, err = chalk_acl()
    assert code == 0
    lines = out.splitlines()
    assert [words(line)[:6] for line in lines] == [
        ["ACL", "SETUSER", f"chalk-{role}", "reset", "on", PASSWORD_PLACEHOLDER] for role in Role
    ]
    assert err.count("no password for chalk-") == 4 and "--password-env" in err


def test_the_password_is_printed_as_its_sha256_only(chalk_acl, monkeypatch):
    monkeypatch.setenv("WORKER_PW", "s3cret-worker")
    code, out, err = chalk_acl("--role", "worker", "--password-env", "WORKER_PW")
    assert code == 0 and err == ""
    digest = hashlib.sha256(b"s3cret-worker").hexdigest()
    assert words(out)[:6] == ["ACL", "SETUSER", "chalk-worker", "reset", "on", "#" + digest]
    assert "s3cret" not in out


def test_names_and_passwords_per_role(chalk_acl, monkeypatch):
    monkeypatch.setenv("C_PW", "c")
    monkeypatch.setenv("M_PW", "m")
    code, out, _ = chalk_acl(
        *("--role", "client", "--role", "monitor"),
        *("--user", "client=trainer", "--user", "monitor=grafana"),
        *("--password-env", "client=C_PW", "--password-env", "monitor=M_PW"),
    )
    assert code == 0
    client, monitor = (words(line) for line in out.splitlines())
    assert client[2] == "trainer" and client[5] == "#" + hashlib.sha256(b"c").hexdigest()
    assert monitor[2] == "grafana" and monitor[5] == "#" + hashlib.sha256(b"m").hexdigest()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--password-env", "PW"), "say whose it is"),
        (("--role", "client", "--password-env", "UNSET_FOR_THIS_TEST"), "unset or empty"),
        (("--user", "admin=root"), "'admin' is not a role"),
        (("--user", "client="), "nothing after the role's name"),
    ],
)
def test_a_wrong_option_says_what_to_do(chalk_acl, monkeypatch, args, said):
    monkeypatch.setenv("PW", "x")
    monkeypatch.delenv("UNSET_FOR_THIS_TEST", raising=False)
    code, out, err = chalk_acl(*args)
    assert code == 2 and out == "" and said in err


def test_the_monitor_only_reads_and_runs_no_script(chalk_acl):
    _, out, _ = chalk_acl("--role", "monitor")
    rules = words(out)[6:]
    keys = [rule for rule in rules if "~" in rule]
    assert keys and all(rule.startswith("%R~") for rule in keys)
    assert "+@write" not in rules and "+evalsha" not in rules and "-@scripting" in rules
    assert rules[rules.index("resetchannels") + 1] == "-@all"  # no channel


def test_the_queue_names_its_keys_escaped_and_quoted(chalk_acl):
    queue = 'grade "it"*é'
    _, out, _ = chalk_acl("--role", "client", "--queue", queue)
    rules = words(out)
    assert '~grade "it"\\*é' in rules
    assert f'~chalk:lane:[012]:{len(queue.encode())}:grade "it"\\*é:*' in rules
    assert '~chalk:ring:[012]:grade "it"\\*é' in rules
    assert "~chalk" not in rules  # CHALK_QUEUE's default is not named


def test_every_queue_given_is_named(chalk_acl):
    _, out, _ = chalk_acl("--role", "worker", "--queue", "a", "--queue", "b")
    rules = words(out)
    assert {"~a", "~b", "~chalk:lane:[012]:1:a:*", "~chalk:ring:[012]:b"} <= set(rules)


@pytest.mark.parametrize(
    ("variables", "args", "db"),
    [
        ({}, (), 0),
        ({"CHALK_REDIS_URL": "redis://:pw@redis:6379/5"}, (), 5),
        ({"CHALK_REDIS_URL": "rediss://redis:6380/3?ssl_cert_reqs=required"}, (), 3),
        (
            {"CHALK_REDIS_URL": "sentinel://s1:26379;sentinel://s2:26379/4?master_name=chalk"},
            (),
            4,
        ),
        ({"CHALK_REDIS_URL": "redis://r/1", "CHALK_BROKER_URL": "redis://b/2"}, (), 2),
        ({"CHALK_REDIS_URL": "redis://r/1", "CHALK_BROKER_URL": "amqp://mq//"}, (), 1),
        ({"CHALK_REDIS_URL": "redis://r/1"}, ("--db", "7"), 7),
    ],
)
def test_celerys_channels_are_named_after_the_brokers_database(
    chalk_acl, monkeypatch, variables, args, db
):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    code, out, err = chalk_acl("--role", "flower", *args)
    assert code == 0, err
    channels = [rule for rule in words(out) if rule.startswith("&")]
    assert channels == [f"&/{db}.celeryev/*", f"&/{db}.celery.pidbox"]
