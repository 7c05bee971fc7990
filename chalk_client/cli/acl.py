"""``chalk acl``: the cluster's Redis users, one ``ACL SETUSER`` line per role.

The lines go to stdout, for the operator to read and apply (``| redis-cli``);
notes (a role without a password) go to stderr. Nothing connects to Redis.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from chalk_client.cluster.acl import PASSWORD_PLACEHOLDER, ROLE_HELP, Role, setuser
from chalk_client.errors import ConfigurationError
from chalk_client.settings import ChalkSettings

COMMAND = "acl"


def add_command(commands: Any) -> None:
    """Add ``chalk acl`` to the ``chalk`` command's parser."""
    roles = "; ".join(f"{role}: {text}" for role, text in ROLE_HELP.items())
    acl = commands.add_parser(
        COMMAND,
        help="print Redis ACL users for the cluster's roles (client, worker, monitor, flower)",
        description=(
            "Print one ACL SETUSER line per role, for Redis 7.0 or later: each user may run "
            f"the commands and touch the keys its role needs, no more ({roles}). Apply them "
            "as an admin: chalk acl ... | redis-cli -h HOST --user ADMIN (its password in "
            "REDISCLI_AUTH)."
        ),
    )
    acl.add_argument(
        "--role",
        action="append",
        choices=list(Role),
        help="a role to print (may be repeated; default: all four)",
    )
    acl.add_argument(
        "--user",
        action="append",
        default=[],
        metavar="ROLE=NAME",
        help="the user name of a role (default: chalk-ROLE, e.g. chalk-worker)",
    )
    acl.add_argument(
        "--password-env",
        action="append",
        default=[],
        metavar="[ROLE=]VARIABLE",
        help=(
            "read a role's password from an environment variable (without ROLE=, the only "
            "role printed); the line holds its SHA-256, not the password. A role without "
            f"one gets {PASSWORD_PLACEHOLDER}, which Redis refuses"
        ),
    )
    acl.add_argument(
        "--queue",
        action="append",
        metavar="NAME",
        help=(
            "a queue of the cluster (may be repeated; default: CHALK_QUEUE). The workers' "
            "user must name every queue: the reconciler requeues any queue's jobs"
        ),
    )
    acl.add_argument(
        "--db",
        type=int,
        metavar="N",
        help=(
            "the broker's Redis database, which names Celery's channels (default: that of "
            "CHALK_BROKER_URL or CHALK_REDIS_URL, else 0)"
        ),
    )


def _database(settings: ChalkSettings) -> int:
    """The database of the broker's Redis URL (the store's when the broker is not Redis)."""
    from chalk_client.cluster.connection import checked_url, sentinel_url

    for url in (settings.broker_url, settings.redis_url):
        if not url:
            continue
        through_sentinels = sentinel_url(url)
        if through_sentinels is not None:
            return through_sentinels.db
        if url.startswith(("redis://", "rediss://", "unix://")):
            from redis.connection import parse_url

            return int(checked_url(url, parse_url).get("db") or 0)
    return 0


def _pairs(values: list[str], option: str, roles: list[Role]) -> dict[Role, str]:
    """``ROLE=VALUE`` options by role; a bare ``VALUE`` is the only role's."""
    found: dict[Role, str] = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not value or (sep and not rest):
            raise ConfigurationError(f"{option} {value!r}: nothing after the role's name")
        if not sep:
            if len(roles) != 1:
                raise ConfigurationError(
                    f"{option} {value}: with several roles, say whose it is: "
                    f"{option} {roles[0]}={value}"
                )
            found[roles[0]] = value
        elif name in set(Role):
            found[Role(name)] = rest
        else:
            raise ConfigurationError(
                f"{option} {value}: {name!r} is not a role; use one of "
                + ", ".join(Role)
                + f" ({option} ROLE=...)"
            )
    return found


def _password(variable: str) -> str:
    value = os.environ.get(variable)
    if not value:
        raise ConfigurationError(
            f"--password-env {variable}: the variable is unset or empty; export it first"
        )
    return value


def run_acl(args: argparse.Namespace) -> int:
    """Print the ``ACL SETUSER`` lines ``args`` ask for; 0, or 2 for a bad option."""
    settings = ChalkSettings()
    roles = [Role(role) for role in dict.fromkeys(args.role or list(Role))]
    users = _pairs(args.user, "--user", roles)
    variables = _pairs(args.password_env, "--password-env", roles)
    queues = list(dict.fromkeys(args.queue or [settings.queue]))
    db = args.db if args.db is not None else _database(settings)
    for role in roles:
        user = users.get(role, f"chalk-{role}")
        password = _password(variables[role]) if role in variables else None
        if password is None:
            print(
                f"chalk acl: no password for {user} ({role}): its line holds "
                f"{PASSWORD_PLACEHOLDER}, which Redis refuses; pass --password-env "
                f"{role}=VARIABLE, or put >PASSWORD there",
                file=sys.stderr,
            )
        print(setuser(user, password, role, queues, db))
    return 0
