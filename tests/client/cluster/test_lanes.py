"""The lanes' scripts on a real Redis: priorities, turns, tokens, and what gives back."""

from __future__ import annotations

import asyncio
import random

import pytest
import redis
from queueing import take_raw

from chalk_client import ChalkClient, ChalkSettings, ScoringJob
from chalk_client.cluster import keys
from chalk_client.cluster.lanes import MAX_TAKE, TAKE, TOKEN, take_args, waiting_lanes
from chalk_client.cluster.messages import HeldEntry, redis_message
from chalk_client.judges import AlwaysPassJudge
from chalk_client.server.queues import _PrioritySlots
from chalk_worker.cluster.delivery import HeldMessages


def jobs(prefix: str, count: int) -> list[ScoringJob]:
    return [ScoringJob(id=f"{prefix}-{i}", judge=AlwaysPassJudge()) for i in range(count)]


def taken_ids(store: redis.Redis, queue: str, consumer: str, count: int) -> list[str]:
    return [HeldEntry.parse(take_raw(store, queue, consumer) or b"").job_id for _ in range(count)]


@pytest.mark.parametrize("queue", ["chalk", "é-queue:ü"])  # bytes, not characters, in Lua
def test_higher_priorities_first_and_batches_in_turn(own_redis_url: str, queue: str) -> None:
    client = ChalkClient(own_redis_url, settings=ChalkSettings(queue=queue))
    client.submit_batch(jobs("big", 4), batch_id="big")
    client.submit_batch(jobs("small", 2), batch_id="small")
    client.submit_batch(jobs("low", 1), batch_id="later", priority="low")
    client.submit_batch(jobs("high", 1), batch_id="urgent", priority="high")
    store = redis.Redis.from_url(own_redis_url)
    assert store.llen(queue) == 8  # a token per waiting job
    lanes = waiting_lanes(store, queue)
    assert [(lane.priority, lane.batch, lane.waiting) for lane in lanes] == [
        ("high", "urgent", 1),
        ("normal", "big", 4),
        ("normal", "small", 2),
        ("low", "later", 1),
    ]
    consumer = f"{queue}@w:h:1:t:1"
    assert taken_ids(store, queue, consumer, 8) == [
        "high-0",
        "big-0",
        "small-0",
        "big-1",
        "small-1",
        "big-2",
        "big-3",
        "low-0",
    ]
    assert take_raw(store, queue, consumer) is None
    assert store.llen(queue) == 0 and store.llen(keys.held(consumer)) == 8
    assert not list(store.scan_iter("chalk:ring:*")) and not list(store.scan_iter("chalk:lane:*"))


def test_a_token_a_dead_consumer_held_goes_back_to_the_queue(own_redis_url: str) -> None:
    client = ChalkClient(own_redis_url)
    client.submit_batch(jobs("j", 1))
    store = redis.Redis.from_url(own_redis_url)
    consumer = "chalk@w:h:1:t:1"
    held = HeldMessages(store, lease_ms=30_000)
    held.register([consumer])
    # The consumer's blocking wait moved the job's token into its held list, then it died.
    assert store.blmove("chalk", keys.held(consumer), 1, "RIGHT", "LEFT") == TOKEN.encode()
    assert store.llen("chalk") == 0
    store.zadd(keys.CONSUMERS, {consumer: 0})
    assert held.give_back_all(consumer, fresh=True) == []
    assert store.lrange("chalk", 0, -1) == [TOKEN.encode()]  # another worker is woken by it


def test_priority_slots_survive_a_cancel_of_running_and_waiting_jobs() -> None:
    async def scenario() -> list[str]:
        slots = _PrioritySlots(1)
        outcomes: list[str] = []

        async def job(name: str) -> None:
            try:
                await slots.acquire("normal")
                try:
                    await asyncio.sleep(60)
                finally:
                    slots.release()
            except asyncio.CancelledError:
                outcomes.append(f"{name} cancelled")
                raise

        tasks = [asyncio.create_task(job(name)) for name in ("running", "w1", "w2", "w3")]
        await asyncio.sleep(0.01)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.wait_for(slots.acquire("high"), 1)  # the one slot is free again
        return outcomes

    assert sorted(asyncio.run(scenario())) == [
        "running cancelled",
        "w1 cancelled",
        "w2 cancelled",
        "w3 cancelled",
    ]


def test_one_take_moves_many_messages_in_the_order_single_takes_would(own_redis_url: str) -> None:
    client = ChalkClient(own_redis_url)
    client.submit_batch(jobs("big", 4), batch_id="big")
    client.submit_batch(jobs("small", 2), batch_id="small")
    client.submit_batch(jobs("high", 1), batch_id="urgent", priority="high")
    store = redis.Redis.from_url(own_redis_url)
    consumer = "chalk@w:h:1:t:1"
    first = store.eval(TAKE.text, *take_args("chalk", consumer, woken=False, count=5))
    assert [HeldEntry.parse(raw).job_id for raw in first] == [
        "high-0",
        "big-0",
        "small-0",
        "big-1",
        "small-1",
    ]
    rest = store.eval(TAKE.text, *take_args("chalk", consumer, woken=False, count=MAX_TAKE))
    assert [HeldEntry.parse(raw).job_id for raw in rest] == ["big-2", "big-3"]
    assert store.eval(TAKE.text, *take_args("chalk", consumer, woken=False, count=3)) == []
    assert store.llen("chalk") == 0 and store.llen(keys.held(consumer)) == 7  # tokens all gone
    assert take_args("chalk", consumer, woken=False, count=10**6)[-1] == str(MAX_TAKE)


@pytest.mark.parametrize("seed", range(8))
def test_takes_of_any_size_give_the_order_of_single_takes(own_redis_url: str, seed: int) -> None:
    # Two queues get the same submits, messages pushed straight into the queue's list
    # and takes; one is then emptied by takes of random sizes, the other one message
    # at a time: lanes joining late, ties of turns, lanes of every length, tokens and
    # plain messages mixed in the list. Both must take the same messages in the same
    # order and leave the same tokens behind.
    rng = random.Random(seed)
    store = redis.Redis.from_url(own_redis_url)
    plan = [
        (rng.choice(["high", "normal", "normal", "low"]), rng.randint(1, 12), rng.randint(0, 2))
        for _ in range(rng.randint(2, 6))
    ]
    early = rng.randint(0, 5)
    sizes = [rng.randint(1, 9) for _ in range(100)]
    orders, left = [], []
    for queue, many in (("many", True), ("single", False)):
        client = ChalkClient(own_redis_url, settings=ChalkSettings(queue=queue))
        consumer = f"{queue}@w:h:1:t:1"

        def take(count: int, queue: str = queue, consumer: str = consumer) -> list[str]:
            found = store.eval(TAKE.text, *take_args(queue, consumer, woken=False, count=count))
            return [HeldEntry.parse(raw).job_id.split(":", 1)[1] for raw in found]

        taken: list[str] = []
        for n, (priority, size, straight) in enumerate(plan):
            batch = [
                ScoringJob(id=f"{queue}:b{n}-{i}", judge=AlwaysPassJudge()) for i in range(size)
            ]
            client.submit_batch(batch, batch_id=f"b{n}", priority=priority)  # type: ignore[arg-type]
            for i in range(straight):
                store.lpush(queue, redis_message(f"{queue}:s{n}-{i}", queue))
            if n == len(plan) // 2:
                for _ in range(early):
                    taken += take(1)
        for size in sizes:
            got = take(size if many else 1)
            if not got:
                break
            taken += got
        orders.append(taken)
        left.append((store.lrange(queue, 0, -1), store.llen(keys.held(consumer))))
    assert orders[0] == orders[1]
    assert sorted(orders[0]) == sorted(
        [f"b{n}-{i}" for n, (_, size, _) in enumerate(plan) for i in range(size)]
        + [f"s{n}-{i}" for n, (_, _, straight) in enumerate(plan) for i in range(straight)]
    )
    assert left[0] == left[1]
