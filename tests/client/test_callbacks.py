"""Batch callbacks without Redis: the URL's form, the signature, the body, the allowlist."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
from collections import Counter

import pytest
from pydantic import ValidationError

from chalk_client import ChalkSettings
from chalk_client.callback_allowlist import CallbackAllowlist, check_target
from chalk_client.callbacks import (
    callback_body,
    callback_headers,
    check_callback_url,
    sign,
    verify_signature,
)
from chalk_client.errors import CallbackRefusedError, InvalidCallbackError
from chalk_client.scoring import ZeroCause
from chalk_client.summary import BatchSummary

ip = ipaddress.ip_address


def test_the_signature_is_the_hmac_sha256_of_the_exact_body():
    body = b'{"batch_id":"b-1","summary":{"total":2}}'
    expected = hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert sign(body, "s3cret") == f"sha256={expected}"
    assert verify_signature(body, f"sha256={expected}", "s3cret")
    assert verify_signature(body, f"sha256={expected}", b"s3cret")
    assert not verify_signature(body + b" ", f"sha256={expected}", "s3cret")
    assert not verify_signature(body, f"sha256={expected}", "other")
    assert not verify_signature(body, None, "s3cret")
    assert not verify_signature(body, expected, "s3cret")  # the prefix is part of it


def test_the_body_is_compact_json_with_the_summary_and_the_headers_sign_it():
    summary = BatchSummary(
        total=3,
        succeeded=2,
        failed=1,
        mean_score=0.5,
        failures=[("j3", "LLM unavailable")],
        batch_id="b-1",
        zeros=Counter({ZeroCause.TIMEOUT: 1}),
    )
    body = callback_body("d-1", "b-1", summary, 1767225600.5)
    document = json.loads(body)
    assert document["delivery_id"] == "d-1" and document["batch_id"] == "b-1"
    assert document["event"] == "batch.finished" and document["finished_at"] == 1767225600.5
    assert document["summary"]["counts"] == {
        "queued": 0,
        "running": 0,
        "succeeded": 2,
        "failed": 1,
        "cancelled": 0,
        "unknown": 0,
    }
    assert document["summary"]["total"] == 3 and document["summary"]["state"] == "finished"
    assert document["summary"]["mean_score"] == 0.5
    assert document["summary"]["failures"] == [{"job_id": "j3", "error": "LLM unavailable"}]
    assert document["summary"]["zeros"] == {"timeout": 1}
    headers = callback_headers(body, "d-1", "b-1", "s3cret")
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Chalk-Delivery"] == "d-1" and headers["X-Chalk-Batch"] == "b-1"
    assert verify_signature(body, headers["X-Chalk-Signature"], "s3cret")
    assert callback_headers(body, "d-1", "b-é\n", "k")["X-Chalk-Batch"] == "b-%C3%A9%0A"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/hook",
        "https://hooks.example.org/chalk?token=abc",
        "http://[::1]:9000/",
        "HTTPS://Hooks.Example.org",
    ],
)
def test_http_and_https_urls_with_a_host_are_taken(url):
    assert check_callback_url(url) == url


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://example.org/x", "http:// or https://"),
        ("file:///etc/passwd", "http:// or https://"),
        ("http:///path", "no host"),
        ("hooks.example.org/x", "http:// or https://"),
        ("http://user:pw@example.org/", "user name or password"),
        ("http://example.org:99999/", "not a URL"),
        ("http://exa mple.org/", "spaces"),
        ("", "non-empty"),
        ("http://example.org/" + "x" * 3000, "characters long"),
    ],
)
def test_a_url_of_the_wrong_form_is_refused_saying_why(url, says):
    with pytest.raises(InvalidCallbackError, match=says) as raised:
        check_callback_url(url)
    assert isinstance(raised.value, ValueError)
    assert "pw" not in str(raised.value)


def test_the_allowlist_matches_names_addresses_and_networks_of_both_families():
    allow = CallbackAllowlist.parse(
        ["Hooks.Example.org.", "10.1.2.3", "192.168.0.0/16", "fd00::/8", "2001:db8::7", ""]
    )
    assert allow.allows_name("hooks.example.org") and allow.allows_name("HOOKS.example.org.")
    assert not allow.allows_name("evil.hooks.example.org")
    assert allow.allows_address(ip("10.1.2.3")) and not allow.allows_address(ip("10.1.2.4"))
    assert allow.allows_address(ip("192.168.77.1")) and not allow.allows_address(ip("192.169.0.1"))
    assert allow.allows_address(ip("fd12::1")) and not allow.allows_address(ip("fe80::1"))
    assert allow.allows_address(ip("2001:db8::7")) and not allow.allows_address(ip("2001:db8::8"))
    assert allow.allows_address(ip("::ffff:10.1.2.3"))  # IPv4 written as IPv6 is IPv4
    assert not allow.allows_address(ip("::ffff:10.1.2.4"))


def test_the_default_allows_loopback_only():
    allow = CallbackAllowlist.parse(ChalkSettings().callback_allow)
    assert allow.allows_address(ip("127.0.0.1")) and allow.allows_address(ip("127.8.9.10"))
    assert allow.allows_address(ip("::1")) and allow.allows_address(ip("::ffff:127.0.0.1"))
    for outside in ("0.0.0.0", "10.0.0.1", "169.254.169.254", "::", "fe80::1", "::ffff:10.0.0.1"):
        assert not allow.allows_address(ip(outside)), outside


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "300.1.2.3", "a b", "exa$mple.org", "::1/200"])
def test_a_bad_allowlist_entry_is_refused_at_start_naming_the_variable(entry, monkeypatch):
    with pytest.raises(ValueError, match="neither a host name"):
        CallbackAllowlist.parse([entry])
    monkeypatch.setenv("CHALK_CALLBACK_ALLOW", f"127.0.0.1,{entry}")
    with pytest.raises(ValidationError, match="callback_allow"):
        ChalkSettings()


def _resolver(table: dict[str, list[str]]):  # type: ignore[no-untyped-def]
    def resolve(host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        if host not in table:
            raise OSError(f"[Errno -2] Name or service not known: {host}")
        return [ip(a) for a in table[host]]

    return resolve


def test_every_address_a_name_resolves_to_must_be_allowed():
    allow = CallbackAllowlist.parse(["127.0.0.0/8", "::1", "10.9.0.0/16"])
    resolve = _resolver(
        {
            "both.test": ["127.0.0.1", "::1"],
            "split.test": ["127.0.0.1", "203.0.113.9"],
            "inner.test": ["10.9.8.7", "10.9.1.1"],
        }
    )
    target = check_target("http://both.test:8000/hook?x=1", allow, resolve)
    assert target.address == ip("127.0.0.1")
    assert target.request_url == "http://127.0.0.1:8000/hook?x=1"
    assert target.host_header == "both.test:8000"
    assert check_target("https://inner.test/h", allow, resolve).host_header == "inner.test"
    with pytest.raises(CallbackRefusedError, match=r"203\.0\.113\.9, not allowed") as refused:
        check_target("http://split.test/hook?token=secret", allow, resolve)
    assert "secret" not in str(refused.value)  # the query (a receiver's token) is not shown
    with pytest.raises(OSError, match="not known"):
        check_target("http://nowhere.test/", allow, resolve)


def test_a_host_listed_by_name_is_allowed_whatever_it_resolves_to():
    allow = CallbackAllowlist.parse(["hooks.internal"])
    resolve = _resolver({"hooks.internal": ["10.0.0.5"], "other.internal": ["10.0.0.5"]})
    target = check_target("https://hooks.internal/chalk", allow, resolve)
    assert (target.address, target.port, target.request_url) == (
        ip("10.0.0.5"),
        443,
        "https://10.0.0.5:443/chalk",
    )
    with pytest.raises(CallbackRefusedError):
        check_target("https://other.internal/chalk", allow, resolve)


def test_ip_literals_are_checked_without_resolving_and_pinned_as_written():
    allow = CallbackAllowlist.parse(["127.0.0.2/32", "::1"])
    nothing = _resolver({})
    assert check_target("http://[::1]:81/x", allow, nothing).request_url == "http://[::1]:81/x"
    assert check_target("http://[::1]:81/x", allow, nothing).host_header == "[::1]:81"
    with pytest.raises(CallbackRefusedError, match=r"127\.0\.0\.1"):
        check_target("http://127.0.0.1:81/x", allow, nothing)
    with pytest.raises(CallbackRefusedError):
        check_target("http://[::ffff:10.0.0.1]/x", allow, nothing)
