"""Batch callbacks on a real Redis, sent by the worker's ``CallbackSender`` in this process.

Jobs are finished by hand (``LeaseStore``), so each test decides when a batch
ends; the sender's looks (``tick``) are called directly, or its thread runs.
Tests with real ``chalk worker`` processes are in ``test_callback_workers.py``.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import logging
import time
from collections.abc import Iterator

import httpx
import pytest
import redis
from callback_receiver import CallbackReceiver

from chalk_client import ChalkClient, ChalkSettings, JobResult, JobStatus, ScoringJob
from chalk_client.callbacks import verify_signature
from chalk_client.cluster import keys
from chalk_client.cluster.callbacks import (
    CLAIM,
    CallbackStatus,
    claim_args,
    parse_claim,
)
from chalk_client.cluster.script import run_script
from chalk_client.errors import InvalidCallbackError
from chalk_client.judges import AlwaysPassJudge
from chalk_worker.cluster.callbacks import CallbackSender, backoff_s
from chalk_worker.cluster.leases import LeaseStore

SECRET = "test-secret"
QUEUE = "no-worker-here"


def settings(**changes: object) -> ChalkSettings:
    values: dict[str, object] = {
        "queue": QUEUE,
        "callback_secret": SECRET,
        "callback_first_delay_s": 0.05,
        "callback_max_delay_s": 0.4,
        "callback_timeout_s": 2.0,
        **changes,
    }
    return ChalkSettings(**values)  # type: ignore[arg-type]


def submit(url: str, batch_id: str, count: int, callback_url: str) -> list[str]:
    jobs = [ScoringJob(id=f"{batch_id}-{i}", judge=AlwaysPassJudge()) for i in range(count)]
    with ChalkClient(url, settings=settings()) as client:
        client.submit_batch(jobs, batch_id=batch_id, callback_url=callback_url)
    return [job.id for job in jobs if job.id is not None]


def finish(url: str, job_ids: list[str], status: JobStatus = JobStatus.SUCCEEDED) -> None:
    leases = LeaseStore(redis.Redis.from_url(url), settings())
    for job_id in job_ids:
        leases.start(job_id, "test-worker")
        error = "no LLM" if status is JobStatus.FAILED else None
        result = JobResult(job_id=job_id, status=status, error=error, worker="test")
        assert leases.finish(result, "test-worker")


@pytest.fixture
def make_sender(own_redis_url: str) -> Iterator:  # type: ignore[type-arg]
    made: list[CallbackSender] = []

    def make(**changes: object) -> CallbackSender:
        resolve = changes.pop("resolve", None)
        transport = changes.pop("transport", None)
        sender = CallbackSender(
            redis.Redis.from_url(own_redis_url),
            settings(**changes),
            own_redis_url,
            f"sender-{len(made)}",
            **({"resolve": resolve} if resolve else {}),  # type: ignore[arg-type]
            transport=transport,  # type: ignore[arg-type]
        )
        made.append(sender)
        return sender

    yield make
    for sender in made:
        sender.close()


def state(url: str, batch_id: str):  # type: ignore[no-untyped-def]
    return ChalkClient(url, settings=settings()).batch_callback(batch_id)


def wait_for_state(url: str, batch_id: str, wanted: CallbackStatus, timeout: float = 20):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while (found := state(url, batch_id)) is None or found.status is not wanted:
        assert time.monotonic() < deadline, f"callback of {batch_id}: {found}"
        time.sleep(0.05)
    return found


def test_the_callback_waits_for_the_last_result_then_posts_one_signed_summary(
    own_redis_url, make_sender, callback_receiver: CallbackReceiver
):
    ids = submit(own_redis_url, "b-one", 3, callback_receiver.url)
    sender = make_sender()
    store = redis.Redis.from_url(own_redis_url)
    assert sender.tick() == 1.0  # nothing finished: looked at again within a second
    finish(own_redis_url, ids[:1])
    finish(own_redis_url, ids[2:], JobStatus.FAILED)
    store.zadd(keys.CALLBACKS, {"b-one": 0})  # due now, not in a second
    sender.tick()
    assert store.hget(keys.callback("b-one"), "cursor") == b"1"  # stopped at the unfinished one
    pending = state(own_redis_url, "b-one")
    assert pending.status is CallbackStatus.PENDING and pending.finished is None
    assert 0 < pending.due_in_s <= 1  # looked at again within a second, on Redis's clock
    assert "when the batch finishes" in pending.describe()
    assert callback_receiver.requests == []
    finish(own_redis_url, ids[1:2])
    store.zadd(keys.CALLBACKS, {"b-one": 0})
    sender.tick()
    (request,) = callback_receiver.wait_for(1)
    assert request.path == "/hook?token=t1"
    assert request.headers["content-type"] == "application/json"
    assert verify_signature(request.body, request.headers["x-chalk-signature"], SECRET)
    body = json.loads(request.body)
    assert body["batch_id"] == "b-one" and request.headers["x-chalk-batch"] == "b-one"
    assert body["delivery_id"] == request.headers["x-chalk-delivery"]
    summary = body["summary"]
    assert summary["total"] == 3 and summary["counts"]["succeeded"] == 2
    assert summary["counts"]["failed"] == 1
    assert summary["failures"] == [{"job_id": ids[2], "error": "no LLM"}]
    done = state(own_redis_url, "b-one")
    assert done.status is CallbackStatus.DELIVERED and done.attempts == 1
    assert done.http_status == 200 and done.delivery_id == body["delivery_id"]
    assert done.due_in_s is None and done.created and done.finished and done.delivered
    assert "delivered" in done.describe() and "t1" not in done.describe()
    assert store.zcard(keys.CALLBACKS) == 0
    sender.tick()
    assert len(callback_receiver.requests) == 1  # once


def test_a_failing_receiver_is_retried_with_growing_delays_and_the_same_delivery(
    own_redis_url, make_sender
):
    receiver = CallbackReceiver(answers=[500, 503, 502, 500])
    try:
        finish(own_redis_url, submit(own_redis_url, "b-retry", 2, receiver.url))
        sender = make_sender(callback_first_delay_s=0.1, callback_max_delay_s=5)
        sender.start()
        requests = receiver.wait_for(5)
        wait_for_state(own_redis_url, "b-retry", CallbackStatus.DELIVERED)
        time.sleep(0.3)
        assert [r.status for r in receiver.requests] == [500, 503, 502, 500, 200]
    finally:
        receiver.close()
    assert len({r.headers["x-chalk-delivery"] for r in requests}) == 1
    assert len({r.body for r in requests}) == 1  # the same bytes each time
    for request in requests:
        assert verify_signature(request.body, request.headers["x-chalk-signature"], SECRET)
    gaps = [b.at - a.at for a, b in itertools.pairwise(requests)]
    assert all(later > earlier for earlier, later in itertools.pairwise(gaps)), gaps
    assert gaps[0] >= 0.08
    delivered = state(own_redis_url, "b-retry")
    assert delivered.attempts == 5 and delivered.last_error == "HTTP 500 Internal Server Error"


def test_backoff_doubles_with_jitter_up_to_the_cap():
    for attempts, low, high in ((1, 0.8, 1.2), (2, 1.6, 2.4), (5, 12.8, 19.2), (40, 3600, 3600)):
        for _ in range(20):
            assert low <= backoff_s(attempts, 1.0, 3600.0) <= high


def test_a_receiver_failing_past_the_give_up_time_is_given_up(
    own_redis_url, make_sender, callback_receiver: CallbackReceiver, caplog
):
    callback_receiver.then = 500
    finish(own_redis_url, submit(own_redis_url, "b-dead", 1, callback_receiver.url))
    sender = make_sender(callback_give_up_s=0.5, callback_max_delay_s=0.1)
    with caplog.at_level(logging.ERROR):
        sender.start()
        given_up = wait_for_state(own_redis_url, "b-dead", CallbackStatus.GIVEN_UP)
        sender.close()  # the thread logs after it records
    count = len(callback_receiver.requests)
    assert 2 <= count == given_up.attempts
    assert "given up after" in given_up.describe() and "HTTP 500" in given_up.describe()
    assert "given up" in caplog.text and "CHALK_CALLBACK_GIVE_UP_S" in caplog.text
    assert redis.Redis.from_url(own_redis_url).zscore(keys.CALLBACKS, "b-dead") is None


def test_an_address_not_allowed_is_refused_not_sent(
    own_redis_url, make_sender, callback_receiver: CallbackReceiver, caplog
):
    finish(own_redis_url, submit(own_redis_url, "b-refused", 1, callback_receiver.url))
    sender = make_sender(callback_allow=["127.0.0.2/32"])
    with caplog.at_level(logging.ERROR):
        sender.tick()
    refused = state(own_redis_url, "b-refused")
    assert refused.status is CallbackStatus.REFUSED
    assert refused.last_error.startswith("refused: ") and "127.0.0.1" in refused.last_error
    assert "CHALK_CALLBACK_ALLOW" in caplog.text and "refused" in refused.describe()
    sender.tick()
    assert callback_receiver.requests == []
    # Sending the batch again (the same URL) arms it again, with the same delivery id.
    submit(own_redis_url, "b-refused", 1, callback_receiver.url)
    make_sender().tick()
    (request,) = callback_receiver.wait_for(1)
    assert request.headers["x-chalk-delivery"] == refused.delivery_id


def test_a_name_resolving_outside_the_allowlist_is_refused_and_a_listed_one_pinned(
    own_redis_url, make_sender, callback_receiver: CallbackReceiver
):
    port = callback_receiver.port
    table = {
        "mixed.test": ["127.0.0.1", "10.20.30.40"],
        "hooks.test": ["127.0.0.1"],
    }

    def resolve(host: str, _port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        return [ipaddress.ip_address(a) for a in table[host]]

    finish(own_redis_url, submit(own_redis_url, "b-mixed", 1, f"http://mixed.test:{port}/x"))
    finish(own_redis_url, submit(own_redis_url, "b-named", 1, f"http://hooks.test:{port}/y"))
    sender = make_sender(resolve=resolve)
    sender.tick()
    sender.tick()
    assert "10.20.30.40" in state(own_redis_url, "b-mixed").last_error
    assert state(own_redis_url, "b-mixed").status is CallbackStatus.REFUSED
    (request,) = callback_receiver.wait_for(1)
    # Sent to the address that was checked, under its name.
    assert request.path == "/y" and request.headers["host"] == f"hooks.test:{port}"
    assert state(own_redis_url, "b-named").status is CallbackStatus.DELIVERED


def test_https_is_sent_to_the_checked_address_with_the_name_for_tls(own_redis_url, make_sender):
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(204)

    def resolve(host: str, _port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        return [ipaddress.ip_address("10.1.2.3")]

    finish(own_redis_url, submit(own_redis_url, "b-tls", 1, "https://hooks.test/chalk?k=1"))
    sender = make_sender(
        resolve=resolve, transport=httpx.MockTransport(answer), callback_allow=["10.0.0.0/8"]
    )
    sender.tick()
    (request,) = seen
    assert str(request.url) == "https://10.1.2.3/chalk?k=1"
    assert request.headers["host"] == "hooks.test"
    assert request.extensions["sni_hostname"] == "hooks.test"  # the certificate is for the name
    assert state(own_redis_url, "b-tls").status is CallbackStatus.DELIVERED


def test_a_redirect_is_not_followed_and_counts_as_a_failure(
    own_redis_url, make_sender, callback_receiver: CallbackReceiver
):
    callback_receiver.answers = [302]
    finish(own_redis_url, submit(own_redis_url, "b-moved", 1, callback_receiver.url))
    sender = make_sender()
    sender.tick()
    retrying = state(own_redis_url, "b-moved")
    assert retrying.status is CallbackStatus.RETRYING and retrying.http_status == 302
    assert "redirects are not followed" in retrying.last_error
    assert "retrying" in retrying.describe() and "1 attempt" in retrying.describe()
    assert [r.path for r in callback_receiver.requests] == ["/hook?token=t1"]


def test_without_a_secret_nothing_is_sent_until_a_worker_has_one(
    own_redis_url, make_sender, callback_receiver: CallbackReceiver, caplog
):
    finish(own_redis_url, submit(own_redis_url, "b-nosecret", 1, callback_receiver.url))
    with caplog.at_level(logging.ERROR):
        make_sender(callback_secret=None).tick()
    assert "set CHALK_CALLBACK_SECRET on the workers" in caplog.text
    waiting = state(own_redis_url, "b-nosecret")
    assert waiting.status is CallbackStatus.PENDING and waiting.attempts == 0
    assert "CHALK_CALLBACK_SECRET" in waiting.last_error
    assert callback_receiver.requests == []
    time.sleep(0.45)  # CHALK_CALLBACK_MAX_DELAY_S caps the wait for a secret too
    make_sender().tick()
    (request,) = callback_receiver.wait_for(1)
    assert verify_signature(request.body, request.headers["x-chalk-signature"], SECRET)
    assert state(own_redis_url, "b-nosecret").status is CallbackStatus.DELIVERED


def test_a_claimed_callback_is_left_alone_until_its_claim_lapses(own_redis_url, callback_receiver):
    finish(own_redis_url, submit(own_redis_url, "b-claim", 1, callback_receiver.url))
    client = redis.Redis.from_url(own_redis_url)

    def claim(claimer: str, claim_ms: int):  # type: ignore[no-untyped-def]
        return parse_claim(run_script(client, CLAIM, *claim_args(claimer, claim_ms)))

    first = claim("a", 300)
    assert [c.batch_id for c in first.claimed] == ["b-claim"]
    second = claim("b", 300)
    assert second.claimed == [] and 0 < second.due_in_s <= 0.3
    time.sleep(0.35)  # "a" died while sending
    third = claim("b", 300)
    assert [c.delivery_id for c in third.claimed] == [first.claimed[0].delivery_id]


def test_submitting_again_keeps_the_delivery_id_and_another_url_makes_a_new_one(
    own_redis_url, callback_receiver
):
    submit(own_redis_url, "b-again", 2, callback_receiver.url)
    first = state(own_redis_url, "b-again")
    submit(own_redis_url, "b-again", 3, callback_receiver.url)  # one more job
    assert state(own_redis_url, "b-again").delivery_id == first.delivery_id
    assert redis.Redis.from_url(own_redis_url).llen(keys.batch("b-again")) == 3
    submit(own_redis_url, "b-again", 3, callback_receiver.url + "&other=1")
    assert state(own_redis_url, "b-again").delivery_id != first.delivery_id
    assert state(own_redis_url, "b-none") is None


def test_a_batch_that_expires_unfinished_gives_its_callback_up(
    own_redis_url, make_sender, callback_receiver, caplog
):
    submit(own_redis_url, "b-gone", 2, callback_receiver.url)
    redis.Redis.from_url(own_redis_url).delete(keys.batch("b-gone"))
    with caplog.at_level(logging.ERROR):
        make_sender().tick()
    gone = state(own_redis_url, "b-gone")
    assert gone.status is CallbackStatus.GIVEN_UP and "expired" in gone.last_error
    assert "expired" in caplog.text
    assert callback_receiver.requests == []


def test_a_callback_url_of_the_wrong_form_sends_nothing(own_redis_url):
    job = ScoringJob(id="never", judge=AlwaysPassJudge())
    with ChalkClient(own_redis_url, settings=settings()) as client:
        with pytest.raises(InvalidCallbackError, match="http:// or https://"):
            client.submit_batch([job], callback_url="ftp://127.0.0.1/x")
        with pytest.raises(InvalidCallbackError, match="at least one job"):
            client.submit_batch([], callback_url="http://127.0.0.1/x")
    assert redis.Redis.from_url(own_redis_url).exists(keys.job("never")) == 0


def test_finishing_is_found_incrementally_in_bounded_steps(own_redis_url):
    ids = submit(own_redis_url, "b-big", 12, "http://127.0.0.1:9/never")
    finish(own_redis_url, ids)
    client = redis.Redis.from_url(own_redis_url)
    cursors = []
    for _ in range(3):
        reply = parse_claim(run_script(client, CLAIM, *claim_args("walker", 1000, walk_ids=5)))
        cursors.append(int(client.hget(keys.callback("b-big"), "cursor") or 0))
    assert cursors == [5, 10, 12]
    assert [c.batch_id for c in reply.claimed] == ["b-big"]


def test_a_bug_while_sending_is_a_failed_try_not_a_stuck_callback(
    own_redis_url, make_sender, callback_receiver, monkeypatch
):
    import chalk_worker.cluster.callbacks as sending

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("summary broke")

    monkeypatch.setattr(sending, "summarize_jobs", broken)
    finish(own_redis_url, submit(own_redis_url, "b-bug", 1, callback_receiver.url))
    make_sender().tick()
    failed = state(own_redis_url, "b-bug")
    assert failed.status is CallbackStatus.RETRYING and "summary broke" in failed.last_error
    assert callback_receiver.requests == []
