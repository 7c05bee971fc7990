"""Events and acknowledgements sent from threads of their own (``broker.background``)."""

from __future__ import annotations

import redis

from chalk_worker.broker.background import BackgroundSender, Command


def test_commands_go_out_in_order_and_a_refused_one_is_handed_to_its_fallback(
    own_redis_url: str,
) -> None:
    client = redis.Redis.from_url(own_redis_url)
    sender = BackgroundSender("test-sender")
    failed: list[str] = []
    for i in range(300):
        sender.send(Command(client, ("RPUSH", "chalk:test:order", i)))
    sender.send(Command(client, ("LPUSH", "chalk:test:order-not-a-list-op", "x")))
    client.set("chalk:test:string", "x")
    sender.send(Command(client, ("RPUSH", "chalk:test:string", 1), lambda: failed.append("wrong")))
    assert sender.flush(timeout=10)
    assert [int(v) for v in client.lrange("chalk:test:order", 0, -1)] == list(range(300))
    assert failed == ["wrong"]  # WRONGTYPE: its fallback, the others sent


def test_while_redis_is_away_events_are_dropped_oldest_first_and_acks_fall_back() -> None:
    away = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    events = BackgroundSender("test-events", max_waiting=2)
    acks = BackgroundSender("test-acks")
    later: list[int] = []
    for i in range(5):
        events.send(Command(away, ("PUBLISH", "chalk:test", i)))
        acks.send(Command(away, ("LREM", "chalk:test", 1, i), lambda i=i: later.append(i)))  # type: ignore[misc]
    assert events.flush(timeout=10) and acks.flush(timeout=10)
    assert sorted(later) == [0, 1, 2, 3, 4]  # every acknowledgement kept for the keeper
