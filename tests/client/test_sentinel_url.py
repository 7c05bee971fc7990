"""``sentinel://`` URLs: what they name, what is wrong with a bad one, and what a log shows."""

from __future__ import annotations

import importlib

import pytest
from redis.exceptions import AuthenticationError, ResponseError
from redis.sentinel import MasterNotFoundError

from chalk_client import ChalkClient
from chalk_client.cluster.connection import connect, redacted, sentinel_url
from chalk_client.cluster.sentinel import SentinelURL
from chalk_client.errors import ConfigurationError, QueueUnavailableError
from chalk_client.settings import ChalkSettings
from chalk_client.store_errors import store_error

THREE = (
    "sentinel://:s3cret@a.example:26379;sentinel://b.example:26380;"
    "sentinel://b.example/2?master_name=chalk"
)


def test_a_url_names_the_sentinels_the_master_and_its_login() -> None:
    parsed = SentinelURL.parse(THREE)
    assert parsed.sentinels == (("a.example", 26379), ("b.example", 26380), ("b.example", 26379))
    assert parsed.master_name == "chalk"
    assert parsed.db == 2
    assert parsed.master_kwargs() == {"db": 2, "password": "s3cret"}
    assert "password" not in parsed.sentinel_kwargs()  # the sentinels take none by default


def test_the_sentinels_password_is_a_query_parameter() -> None:
    parsed = SentinelURL.parse("sentinel://h:1?master_name=m&sentinel_password=pw")
    assert parsed.sentinel_kwargs()["password"] == "pw"
    assert parsed.master_kwargs() == {"db": 0}


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("sentinel://h:26379", "master_name=NAME"),
        ("sentinel://h:26379;redis://h:6379?master_name=m", "every part must start"),
        ("sentinel://h/x?master_name=m", "must be a number"),
        ("sentinel://h/1;sentinel://i/2?master_name=m", "different values of db"),
        ("sentinel://h?master=m", "an unknown query parameter (known: master_name"),
        ("sentinel://h:port?master_name=m", "port is not a number"),
        ("sentinel://;;", "names no"),
    ],
)
def test_a_bad_url_is_refused_saying_what_to_fix(url: str, said: str) -> None:
    with pytest.raises(ConfigurationError, match="is not a Redis URL") as caught:
        connect(url)
    assert said in str(caught.value)
    with pytest.raises(ConfigurationError):
        ChalkClient(url)


def test_logs_and_messages_never_show_the_password() -> None:
    shown = redacted(THREE)
    assert "s3cret" not in shown
    assert shown.startswith("sentinel://:***@a.example:26379;sentinel://b.example:26380")
    assert "s3cret" not in SentinelURL.parse(THREE).shown()
    guarded = redacted("sentinel://h:1?master_name=m&sentinel_password=watch")
    assert guarded == "sentinel://h:1?master_name=m&sentinel_password=***"
    assert "s3cret" not in repr(ChalkClient(THREE))


def test_the_worker_gives_celery_one_sentinel_in_the_url_and_all_in_the_options() -> None:
    # Given ";"-separated URLs, Celery moves to the next after a connection error and
    # kombu makes that URL's own transport, not Chalk's: the broker URL is one sentinel.
    parsed = sentinel_url(THREE)
    assert parsed is not None
    assert parsed.kombu_url() == "sentinel://:s3cret@a.example:26379/2"
    assert parsed.backend_url() == (
        "sentinel://:s3cret@a.example:26379/2;sentinel://:s3cret@b.example:26380/2;"
        "sentinel://:s3cret@b.example:26379/2"
    )
    worker_app = importlib.import_module("chalk_worker.app")  # the worker's, as it configures it
    app = worker_app.make_app(ChalkSettings(redis_url=THREE), THREE)
    assert app.conf.broker_transport == "chalk_worker.broker.sentinel:SentinelTransport"
    assert app.conf.broker_url == parsed.kombu_url()
    options = app.conf.broker_transport_options
    assert options["master_name"] == "chalk"
    assert options["chalk_sentinels"] == [
        ["a.example", 26379],
        ["b.example", 26380],
        ["b.example", 26379],
    ]
    assert app.conf.result_backend_transport_options["master_name"] == "chalk"
    connection = app.connection_for_read()
    assert connection.alt == []  # nothing to move to: Chalk's transport it stays
    assert connection.transport_cls == "chalk_worker.broker.sentinel:SentinelTransport"


def test_an_ipv6_sentinel_keeps_its_brackets() -> None:
    parsed = SentinelURL.parse("sentinel://:pw@[::1]:26379/0?master_name=m")
    assert parsed.sentinels == (("::1", 26379),)
    assert parsed.kombu_url() == "sentinel://:pw@[::1]:26379/0"
    assert parsed.shown() == "sentinel://[::1]:26379/0?master_name=m"


@pytest.mark.parametrize(
    "url",
    [
        "sentinel://:a;b@127.0.0.1:1/0?master_name=chalk",
        "sentinel://h:1;sentinel://:se;cret@h:2/0?master_name=chalk",
        "sentinel://:p@ss:w/rd%@127.0.0.1:1/0?master_name=chalk",
        "sentinel://h:1/0?master_name=chalk&sentinel_password=top#secret",
    ],
)
def test_a_password_not_percent_encoded_is_refused_without_showing_it(url: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        connect(url)
    said = str(caught.value)
    assert "percent-encode" in said
    for piece in ("se;cret", "a;b", "rd%", "secret", "ss:w"):
        assert piece not in said, said


def test_a_sentinel_password_with_any_character_is_hidden() -> None:
    assert "top" not in redacted("sentinel://h:1?master_name=m&sentinel_password=top;secret")


def test_sentinels_that_name_no_master_are_told_apart_from_a_dead_redis() -> None:
    url = "sentinel://:pw@h:1?master_name=m&sentinel_password=s3cr3t"
    error = store_error(MasterNotFoundError("No master found for 'm'"), url)
    assert isinstance(error, QueueUnavailableError)
    said = str(error)
    assert "sentinels" in said and "master_name" in said and "sentinel_password" in said
    assert "s3cr3t" not in said and ":pw@" not in said


def test_a_database_redis_lacks_and_refused_credentials_say_what_to_fix() -> None:
    url = "redis://:pw@h:6379/99"
    error = store_error(ResponseError("DB index is out of range"), url)
    assert isinstance(error, ConfigurationError) and "`databases` setting" in str(error)
    refused = str(store_error(AuthenticationError("invalid password."), url))
    assert "invalid password. Check" in refused and ".." not in refused and ":pw@" not in refused


def test_asyncio_clients_talk_to_the_sentinels_with_asyncio_s_retry() -> None:
    # A synchronous Retry in an asyncio connection never sees its errors (the coroutine
    # it is handed raises only once awaited) nor disconnects the broken connection.
    from redis.asyncio.retry import Retry as AsyncRetry

    from chalk_client.cluster.sentinel import blocking_pool_async, connect_sentinel_async

    client = connect_sentinel_async(THREE)
    pool = blocking_pool_async(THREE, max_connections=2, timeout=1)
    for manager in (client.connection_pool.sentinel_manager, pool.sentinel_manager):  # type: ignore[attr-defined]
        for sentinel in manager.sentinels:
            assert isinstance(sentinel.connection_pool.connection_kwargs["retry"], AsyncRetry)
