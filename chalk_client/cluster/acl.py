"""Redis ACL users per role: what each part of a cluster may do in Redis, and no more.

``chalk acl`` prints one ``ACL SETUSER`` line per role for the operator to apply
(Redis 7.0 or later: it gives read and write permission on keys apart, ``%R~``
and ``%W~``). The roles:

- ``client``: submit, wait, read results, cancel and retry batches (``ChalkClient``,
  ``chalk score``, ``chalk serve``, ``chalk cancel``, ``chalk retry``, ``chalk purge
  BATCH``);
- ``worker``: take messages, lease, finish, reconcile, presence, callbacks, rubric
  verdicts and LLM pacing, and Celery's keys and channels (events, remote control);
  ``chalk purge`` of the whole queue takes messages as a worker does, so it runs
  as this user;
- ``monitor``: read only (``chalk status``, ``chalk health``): not one write, not one
  script, no channel;
- ``flower``: Flower, which reads the queue's length and hears the workers' events
  but also asks the workers for their state on Celery's remote-control channel:
  it declares its reply queues and bindings, so it needs a few writes of
  kombu's keys and ``PUBLISH`` on that channel, on which ``shutdown`` travels too.

How Redis 7 checks scripts (measured on 7.0): every command a script runs is
checked against the caller's permissions on the key it names, declared in
``KEYS`` or not, so the keys the scripts reach by name (lanes, rings, done
lists, archive counts) work for a user allowed to touch them. And every key a
script declares needs read *and* write permission, whatever the script does
with it: a read-only user runs no script (``chalk status`` reads a callback with
plain reads for that reason).

What the permissions cannot tell apart, the keys being what they are, is in the
documentation (``docs/operating/securing-redis.md``): a client writes results (a
cancel writes them) and any batch's keys, and a worker writes every job's.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from chalk_client.cluster import keys


class Role(StrEnum):
    """A part of the cluster with a Redis user of its own."""

    CLIENT = "client"
    WORKER = "worker"
    MONITOR = "monitor"
    FLOWER = "flower"


ROLE_HELP = {
    Role.CLIENT: "submit, wait, read results, cancel and retry batches",
    Role.WORKER: "score: take messages, lease, finish, reconcile, Celery's events",
    Role.MONITOR: "read only: chalk status, chalk health",
    Role.FLOWER: "Flower: the queue's length, the workers' events, remote-control questions",
}
"""What each role is for, in a few words (``chalk acl --help``)."""


class Access(StrEnum):
    """A permission on keys, as ``ACL SETUSER`` spells it before a key pattern."""

    READ = "%R~"
    WRITE = "%W~"
    READ_WRITE = "~"


@dataclass(frozen=True)
class KeyGrant:
    """Permission to read, write or both on the keys a glob pattern matches."""

    access: Access
    pattern: str

    def rule(self) -> str:
        """The grant as an ``ACL SETUSER`` rule."""
        return f"{self.access}{self.pattern}"


COMMANDS_BASE = ("-@all", "+@connection")
"""Every role: nothing, then connecting (``HELLO``, ``AUTH``, ``PING``, ``SELECT``, ...)."""
COMMANDS_READ_WRITE = ("+@read", "+@write", "-@dangerous", "-@scripting", "+@transaction")
"""Data commands, bounded by the key patterns. ``-@dangerous`` drops ``FLUSHALL``,
``KEYS``, ``SORT``, ``CONFIG``, ``DEBUG``, ``MIGRATE``, ``RESTORE`` and the admin's;
``-@scripting`` the writes no key bounds (``FUNCTION FLUSH``, ``FUNCTION LOAD``)."""
SCRIPTS = ("+evalsha", "+script|load")
"""Running the project's Lua scripts, loading them again after Redis forgot them."""
PUBSUB = ("+publish", "+subscribe", "+unsubscribe", "+psubscribe", "+punsubscribe")
"""Celery's events and remote control (the channels are bounded by ``&`` patterns)."""

COMMANDS: dict[Role, tuple[str, ...]] = {
    Role.CLIENT: (*COMMANDS_BASE, *COMMANDS_READ_WRITE, *SCRIPTS, "+time"),
    Role.WORKER: (
        *COMMANDS_BASE,
        *COMMANDS_READ_WRITE,
        *SCRIPTS,
        "+script|exists",  # kombu's scripts
        "+time",
        *PUBSUB,
    ),
    Role.MONITOR: (
        *COMMANDS_BASE,
        "+@read",
        "-@dangerous",
        "-@scripting",
        "+multi",
        "+exec",
        "+discard",
        "+time",
        "+info",  # chalk health: memory, persistence, replicas
    ),
    Role.FLOWER: (
        *COMMANDS_BASE,
        *COMMANDS_READ_WRITE,
        *SCRIPTS,
        "+script|exists",
        "+time",
        *PUBSUB,
    ),
}
"""The commands of each role, as ``ACL SETUSER`` rules (the last one naming a command wins)."""

KOMBU_UNACKED = ("unacked", "unacked_index")
"""kombu's record of messages consumers of other queues took and have not acknowledged."""
KOMBU_MUTEX = "unacked_mutex"
"""The lock kombu takes to give such messages back when their visibility timeout passes."""
KOMBU_BINDINGS = ("_kombu.binding.*", "_kombu.binding_permanent.*", "_kombu.binding_deadlines")
"""Which queues each exchange routes to, and when temporary bindings expire."""
PIDBOX = "*@*.celery.pidbox"
"""A worker's remote-control queue, ``NODE.celery.pidbox`` (a node is ``NAME@HOST``)."""
REPLY_QUEUE = "????????-????-????-????-????????????.reply.celery.pidbox"
"""A remote-control reply queue: a UUID, then the reply exchange (no ``chalk:`` key fits)."""


def glob_escape(text: str) -> str:
    """``text`` as a glob pattern that matches only itself."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def _queue_keys(queue: str) -> list[str]:
    """The queue's own list, its lanes and its rings, as patterns."""
    name = glob_escape(queue)
    return [
        name,
        f"{keys.LANE_PREFIX}[012]:{len(queue.encode())}:{name}:*",
        f"{keys.RING_PREFIX}[012]:{name}",
    ]


def _grants(access: Access, patterns: Sequence[str]) -> list[KeyGrant]:
    return [KeyGrant(access, pattern) for pattern in patterns]


def key_grants(role: Role, queues: Sequence[str]) -> list[KeyGrant]:
    """The keys ``role`` may read or write, for a cluster of ``queues``."""
    queue_keys = [pattern for queue in queues for pattern in _queue_keys(queue)]
    if role is Role.CLIENT:
        return [
            *_grants(
                Access.READ_WRITE,
                [
                    keys.job("*"),
                    keys.result("*"),  # written by a cancel, deleted by a retry
                    keys.watchers("*"),
                    keys.done("*"),
                    keys.blobref("*"),
                    keys.batch("*"),
                    keys.BATCHES,
                    keys.callback("*"),
                    keys.CALLBACKS,
                    keys.PENDING,
                    keys.PUSHES,
                    keys.RUNNING,  # a cancel frees the lease of a running job
                    *queue_keys,
                ],
            ),
            KeyGrant(Access.WRITE, keys.blob("*")),  # written, never read back
            KeyGrant(Access.READ, keys.worker("*")),  # is any worker alive
        ]
    if role is Role.WORKER:
        return [
            *_grants(
                Access.READ_WRITE,
                [
                    keys.job("*"),
                    keys.result("*"),
                    keys.watchers("*"),
                    keys.blob("*"),  # read, and deleted with the last job using it
                    keys.blobref("*"),
                    keys.callback("*"),
                    keys.CALLBACKS,
                    keys.PENDING,
                    keys.PUSHES,
                    keys.RUNNING,
                    keys.held("*"),
                    keys.CONSUMERS,
                    keys.TAKEN,
                    keys.RECONCILER,
                    keys.worker("*"),
                    keys.verdict("*"),
                    keys.llm_rate("*"),
                    *queue_keys,
                    *KOMBU_UNACKED,
                    KOMBU_MUTEX,
                    *KOMBU_BINDINGS,
                    PIDBOX,
                    REPLY_QUEUE,
                ],
            ),
            KeyGrant(Access.WRITE, keys.done("*")),  # tells waiters, never reads their lists
            KeyGrant(Access.READ, keys.batch("*")),  # a callback's batch: finished yet?
        ]
    if role is Role.MONITOR:
        return _grants(
            Access.READ,
            [
                keys.job("*"),  # chalk status JOB: its attempts, whether it runs
                keys.result("*"),
                keys.batch("*"),
                keys.BATCHES,
                keys.callback("*"),
                keys.CALLBACKS,
                keys.worker("*"),
                keys.RUNNING,
                keys.CONSUMERS,
                keys.held("*"),
                *queue_keys,
                *KOMBU_UNACKED,
            ],
        )
    return [
        *_grants(Access.READ, [glob_escape(queue) for queue in queues]),
        KeyGrant(Access.READ, "celeryev.*"),  # the length of its own event queue
        *_grants(Access.READ, KOMBU_UNACKED),
        *_grants(
            Access.READ_WRITE,
            [
                KOMBU_MUTEX,
                "_kombu.binding.celeryev",
                "_kombu.binding.reply.celery.pidbox",
                "_kombu.binding_permanent.reply.celery.pidbox",
                "_kombu.binding_deadlines",
                REPLY_QUEUE,
            ],
        ),
    ]


def channels(role: Role, db: int) -> list[str]:
    """The pub/sub channels ``role`` may use: Celery's, named after the broker's database."""
    if role in (Role.WORKER, Role.FLOWER):
        return [f"&/{db}.celeryev/*", f"&/{db}.celery.pidbox"]
    return []


def password_rule(password: str | None) -> str:
    """The password as an ``ACL SETUSER`` rule: its SHA-256 (``#``), so the line does not
    hold it; with none, a placeholder Redis refuses (the whole line is then refused)."""
    if password is None:
        return PASSWORD_PLACEHOLDER
    return "#" + hashlib.sha256(password.encode()).hexdigest()


PASSWORD_PLACEHOLDER = "#SHA256_OF_PASSWORD"
"""Where a line given no password has one: not 64 hex digits, so Redis refuses the line."""


def rules(role: Role, queues: Sequence[str], db: int) -> list[str]:
    """Every rule of ``role``'s user but its name and password: keys, channels, commands."""
    return [
        *(grant.rule() for grant in key_grants(role, queues)),
        "resetchannels",
        *channels(role, db),
        *COMMANDS[role],
    ]


def setuser(user: str, password: str | None, role: Role, queues: Sequence[str], db: int) -> str:
    """The ``ACL SETUSER`` line that makes ``user`` a ``role`` (``reset`` first: applied
    again, it replaces the user's permissions instead of adding to them)."""
    words = ["ACL", "SETUSER", user, "reset", "on", password_rule(password)]
    return " ".join(_quoted(word) for word in [*words, *rules(role, queues, db)])


_BARE = re.compile(r"[A-Za-z0-9_.:@~%&*?\[\]#+\-/|!=,^$<>]+")


def _quoted(word: str) -> str:
    """``word`` as ``redis-cli`` reads it: bare if it can be, else in double quotes."""
    if _BARE.fullmatch(word):
        return word
    escaped = word.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(c if c.isprintable() else _hex(c) for c in escaped) + '"'


def _hex(char: str) -> str:
    return "".join(f"\\x{byte:02x}" for byte in char.encode())
