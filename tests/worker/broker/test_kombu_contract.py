"""What Chalk's broker takes from kombu's Redis transport is still there, and still fits.

``chalk_worker.broker`` subclasses kombu's Redis channel, QoS, message and
transport, overrides some of their private methods, and reads some of their
private attributes. kombu may change any of those in a minor release: an
override kombu no longer calls is silently dead code, one whose signature moved
is called with arguments it does not take. ``pyproject.toml`` bounds kombu to
the releases this was checked against; these tests are what says a new release
fits before the bound is raised. Each failure names the method or attribute.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import kombu
import pytest
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils import url as kombu_url

from chalk_worker.broker.qos import QoS
from chalk_worker.broker.sentinel import SentinelChannel, SentinelTransport
from chalk_worker.broker.transport import Channel, Message, Transport

# Chalk's class, kombu's class it stands in for, and what Chalk overrides there.
OVERRIDES: list[tuple[type, type, set[str]]] = [
    (
        Channel,
        kombu_redis.Channel,
        {
            "Message",
            "QoS",
            "from_transport_options",
            "_brpop_start",
            "_brpop_read",
            "_connparams",
            "_create_client",
            "_deliver_fanout_message",
            "_put_fanout",
            "close",
        },
    ),
    (
        QoS,
        kombu_redis.QoS,
        {
            "__init__",
            "append",
            "ack",
            "reject",
            "restore_unacked",
            "pipe_or_acquire",
            "can_consume",
            "can_consume_max_estimate",
        },
    ),
    (Message, virtual.Message, {"__init__"}),
    (Transport, kombu_redis.Transport, {"Channel"}),
    (
        SentinelChannel,
        kombu_redis.SentinelChannel,
        {"from_transport_options", "_sentinel_managed_pool"},
    ),
    (SentinelTransport, kombu_redis.SentinelTransport, {"Channel", "default_port"}),
]

# What Chalk reads or calls on kombu's objects without overriding it.
CHANNEL_ATTRIBUTES = [
    "_in_poll",  # the connection a blocking read is in flight on
    "_brpop_sent_at",
    "_queue_cycle",  # rotated after a BLMOVE, as kombu does after BRPOP
    "_get_publish_topics",  # the channels an event is published to
    "qos",
    "_flush_brpop_reauth",
    "brpop_timeout",
    "active_queues",
    "pool",
    "client",
    "connection",
    "connection_errors",
]
QOS_ATTRIBUTES = ["channel", "_delivered", "_dirty", "prefetch_count"]
TRANSPORT_ATTRIBUTES = ["_deliver", "connection_errors", "channel_errors"]
SENTINEL_CHANNEL_ATTRIBUTES = ["_sentinel_managed_pool", "_connparams"]

_PLUMBING = {"__doc__", "__module__", "__qualname__", "__annotations__", "__dict__"}


def _overrides() -> Iterator[tuple[type, type, str]]:
    for ours, theirs, names in OVERRIDES:
        for name in sorted(names):
            yield ours, theirs, name


def _where(cls: type, name: str) -> str:
    return f"{cls.__module__}.{cls.__qualname__}.{name}"


def _unwrap(value: object) -> Callable[..., Any] | None:
    if isinstance(value, (staticmethod, classmethod)):
        return _unwrap(value.__func__)
    return value if inspect.isfunction(value) else None


def _misfit(ours: inspect.Signature, theirs: inspect.Signature) -> str | None:
    """Why a method with signature ``ours`` cannot stand in for ``theirs`` (``None``: it can).

    Whatever kombu may pass to its method, ours must take: the same positions, the
    same keywords, and a default wherever kombu's has one (callers may leave it out).
    Parameters only ours has need a default, as kombu never passes them.
    """
    P = inspect.Parameter
    mine = list(ours.parameters.values())
    var_args = any(p.kind is P.VAR_POSITIONAL for p in mine)
    var_kwargs = any(p.kind is P.VAR_KEYWORD for p in mine)
    my_positions = [p for p in mine if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    my_names = {p.name: p for p in mine if p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)}
    matched: set[str] = set()
    for index, param in enumerate(
        p for p in theirs.parameters.values() if p.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD)
    ):
        positional = param.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)
        by_name = param.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)
        if positional:
            if index < len(my_positions):
                mate = my_positions[index]
                if by_name and mate.name != param.name and not var_kwargs:
                    return f"its parameter {index} is {mate.name!r}; kombu's is {param.name!r}"
            elif not var_args:
                return f"it takes no parameter {index} ({param.name!r}, which kombu's takes)"
            else:
                continue
        else:
            mate = my_names.get(param.name)  # type: ignore[assignment]
            if mate is None:
                if var_kwargs:
                    continue
                return f"it does not take the keyword {param.name!r}"
        matched.add(mate.name)
        if param.default is not P.empty and mate.default is P.empty:
            return f"kombu's {param.name!r} has a default and Chalk's {mate.name!r} has none"
    return _misfit_rest(ours, theirs, matched)


def _misfit_rest(
    ours: inspect.Signature, theirs: inspect.Signature, matched: set[str]
) -> str | None:
    """The rest of ``_misfit``: star arguments, and parameters only Chalk's method has."""
    P = inspect.Parameter
    for kind in (P.VAR_POSITIONAL, P.VAR_KEYWORD):
        kombu_takes = any(p.kind is kind for p in theirs.parameters.values())
        if kombu_takes and not any(p.kind is kind for p in ours.parameters.values()):
            star = "*" if kind is P.VAR_POSITIONAL else "**"
            return f"kombu's takes {star}arguments and Chalk's does not"
    for param in ours.parameters.values():
        extra = param.name not in matched and param.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD)
        if extra and param.default is P.empty:
            return f"it requires {param.name!r}, which kombu never passes"
    return None


@pytest.mark.parametrize(
    ("ours", "theirs", "name"),
    list(_overrides()),
    ids=[f"{o.__name__}.{n}" for o, _, n in _overrides()],
)
def test_every_override_still_overrides_something_that_fits(
    ours: type, theirs: type, name: str
) -> None:
    assert name in vars(ours), f"{_where(ours, name)} is listed here but Chalk no longer defines it"
    assert hasattr(theirs, name), (
        f"kombu {kombu.__version__} has no {_where(theirs, name)}: Chalk's override "
        f"{_where(ours, name)} would never be called"
    )
    mine, kombus = vars(ours)[name], inspect.getattr_static(theirs, name)
    if isinstance(kombus, type):
        assert isinstance(mine, type) and issubclass(mine, kombus), (
            f"{_where(ours, name)} must be a subclass of kombu's {kombus.__qualname__}"
        )
        return
    if isinstance(kombus, property):
        assert isinstance(mine, property), f"{_where(theirs, name)} is a property; Chalk's is not"
        return
    kombu_function = _unwrap(kombus)
    if kombu_function is None:  # a plain value: a tuple of option names, a port
        assert isinstance(mine, type(kombus)), (
            f"{_where(theirs, name)} is a {type(kombus).__name__}; "
            f"Chalk's is a {type(mine).__name__}"
        )
        if isinstance(kombus, tuple):
            missing = set(kombus) - set(mine)
            assert not missing, f"{_where(ours, name)} lost kombu's {sorted(missing)}"
        return
    our_function = _unwrap(mine)
    assert our_function is not None, f"{_where(theirs, name)} is a method; Chalk's is not"
    assert type(inspect.getattr_static(theirs, name)) is type(mine), (
        f"{_where(theirs, name)} and Chalk's differ in kind (static, class or plain method)"
    )
    why = _misfit(inspect.signature(our_function), inspect.signature(kombu_function))
    assert why is None, (
        f"{_where(ours, name)} no longer fits kombu {kombu.__version__}'s "
        f"{_where(theirs, name)}{inspect.signature(kombu_function)}: {why}"
    )


@pytest.mark.parametrize(
    ("ours", "theirs", "names"), OVERRIDES, ids=[o[0].__name__ for o in OVERRIDES]
)
def test_nothing_else_overrides_kombu_unawares(ours: type, theirs: type, names: set[str]) -> None:
    """A helper of Chalk's named like one of kombu's (a new one, say) would replace it."""
    clashing = {
        name for name in vars(ours) if name not in _PLUMBING and hasattr(theirs, name)
    } - names
    assert not clashing, (
        f"{ours.__qualname__} overrides kombu {kombu.__version__}'s {sorted(clashing)}: "
        "rename Chalk's, or list the override here once it is meant"
    )


def test_the_channel_has_what_chalk_reads_of_it(redis_url: str) -> None:
    with kombu.Connection(redis_url, transport=Transport) as connection:
        channel = connection.default_channel
        missing = [name for name in CHANNEL_ATTRIBUTES if not hasattr(channel, name)]
        assert not missing, f"kombu {kombu.__version__}'s Redis channel has no {missing}"
        qos = channel.qos
        missing = [name for name in QOS_ATTRIBUTES if not hasattr(qos, name)]
        assert not missing, f"kombu {kombu.__version__}'s Redis QoS has no {missing}"
        transport = connection.transport
        missing = [name for name in TRANSPORT_ATTRIBUTES if not hasattr(transport, name)]
        assert not missing, f"kombu {kombu.__version__}'s Redis transport has no {missing}"
        assert inspect.signature(transport._deliver).parameters.keys() >= {"message", "queue"}


def test_the_sentinel_channel_has_what_chalk_reads_of_it() -> None:
    missing = [
        name
        for name in SENTINEL_CHANNEL_ATTRIBUTES
        if not hasattr(kombu_redis.SentinelChannel, name)
    ]
    assert not missing, f"kombu {kombu.__version__}'s SentinelChannel has no {missing}"


def test_urls_are_still_parsed_as_chalk_reads_them() -> None:
    """The Sentinel channel reads each ``sentinel://`` part of the broker URL with kombu."""
    parts = kombu_url._parse_url("sentinel://:secret@10.0.0.2:26380/0")
    assert (parts.scheme, parts.hostname, parts.port) == ("sentinel", "10.0.0.2", 26380)
    assert kombu_url.parse_url("redis://h:6380/3")["port"] == 6380


def _demo(a: int, b: int = 0, *, c: str = "") -> None: ...


@pytest.mark.parametrize(
    ("ours", "fits"),
    [
        ("(a, b=0, *, c='')", True),
        ("(*args, **kwargs)", True),
        ("(a, b=0, *, c='', d=1)", True),
        ("(a, b, *, c='')", False),  # a caller leaving b out would fail
        ("(x, b=0, *, c='')", False),  # a caller passing a= by name would fail
        ("(a, b=0)", False),  # no c
        ("(a, b=0, *, c='', d)", False),  # d is never passed
    ],
)
def test_the_fit_check_itself(ours: str, fits: bool) -> None:
    """The check above tells a fitting override from each way one stops fitting."""
    namespace: dict[str, Any] = {}
    exec(f"def f{ours}: pass", namespace)
    why = _misfit(inspect.signature(namespace["f"]), inspect.signature(_demo))
    assert (why is None) is fits, why
