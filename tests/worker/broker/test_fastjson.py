"""The worker's JSON reads back exactly what kombu's own does, for what messages hold."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from kombu import serialization
from kombu.utils import json as kombu_json

from chalk_worker.broker import fastjson

EVENT = {
    "hostname": "chalk@host",
    "uuid": "4f8c0a1e-0000-4000-8000-000000000000",
    "args": "('job-1',)",
    "kwargs": "{'batch': 'b'}",
    "timestamp": 1764868000.123456,
    "runtime": 1e-05,
    "loadavg": [0.5, 1.25, 2.0],
    "pid": 4242,
    "clock": 17,
    "name": "chalk.score",
    "retries": 0,
    "nested": {"ok": True, "none": None, "text": "naïve ✓ \u2028"},
}
MARKED = {
    "eta": dt.datetime(2026, 12, 4, 18, 0, tzinfo=dt.UTC),
    "day": dt.date(2026, 12, 4),
    "amount": Decimal("1.10"),
    "raw": b"bytes",
    "binary": b"\xff\x00",
}


@pytest.mark.parametrize("value", [EVENT, MARKED, [EVENT, MARKED], "text", 3, None])
def test_what_is_written_reads_back_as_kombu_s_own(value):
    written = fastjson.dumps(value)
    assert kombu_json.loads(written) == kombu_json.loads(kombu_json.dumps(value))
    assert fastjson.loads(written) == kombu_json.loads(kombu_json.dumps(value))
    assert fastjson.loads(written.encode()) == fastjson.loads(memoryview(written.encode()))


def test_what_orjson_refuses_is_written_by_kombu():
    value = {1: "int key", "big": 2**70}
    assert fastjson.dumps(value) == kombu_json.dumps(value)


@pytest.mark.parametrize(
    "text",
    [
        '{"\\u005f_type__": "bytes", "__value__": "x"}',  # a marker spelled with escapes
        '{"__typ\\u0065__": "decimal", "__value__": "1.5"}',
        '{"a": NaN}',
        '"\\ud800"',
        '{"n": 123456789012345678901234567890}',
        '{"n": -9223372036854775809}',
    ],
)
def test_text_orjson_cannot_read_is_read_as_kombu_reads_it(text):
    expected = kombu_json.loads(text)
    got = fastjson.loads(text)
    assert repr(got) == repr(expected)


@pytest.mark.parametrize("text", ["{", "", b"\xff\xfe", '{"a": 1,}', "[" * 2000 + "]" * 2000])
def test_bad_text_fails_as_it_does_with_kombu(text):
    with pytest.raises(Exception) as kombu_error:
        kombu_json.loads(text)
    with pytest.raises(type(kombu_error.value)):
        fastjson.loads(text)


def test_installed_it_is_kombu_s_json_serializer():
    before = serialization.registry._encoders["json"]
    try:
        fastjson.install()
        content_type, encoding, body = serialization.dumps(EVENT, serializer="json")
        assert (content_type, encoding) == ("application/json", "utf-8")
        assert serialization.loads(body, content_type, encoding) == EVENT
        assert kombu_json.loads(body) == EVENT  # any kombu reads it
    finally:
        serialization.registry._encoders["json"] = before
        serialization.register(
            "json",
            kombu_json.dumps,
            kombu_json.loads,
            content_type="application/json",
            content_encoding="utf-8",
        )
