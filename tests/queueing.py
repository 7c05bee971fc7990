"""What tests do to a queue by hand, as a worker's channel or an operator would."""

from __future__ import annotations

import redis

from chalk_client.cluster import keys
from chalk_client.cluster.lanes import TAKE, Rank, take_args, waiting_messages

__all__ = ["drop_waiting", "pop_waiting", "rename_waiting", "take_raw", "waiting_messages"]


def take_raw(store: redis.Redis, queue: str, consumer: str) -> bytes | None:
    """The next message, moved into ``consumer``'s held list by the script a worker runs."""
    taken = store.eval(TAKE.text, *take_args(queue, consumer, woken=False))  # type: ignore[arg-type]
    if not taken:
        return None
    first = taken[0]
    return first if isinstance(first, bytes) else str(first).encode()


def drop_waiting(store: redis.Redis, queue: str) -> None:
    """Lose every message waiting for ``queue``, its tokens with them (as a flush would)."""
    for rank in Rank:
        for lane in store.zrange(keys.ring(queue, rank), 0, -1):
            store.delete(lane)
        store.delete(keys.ring(queue, rank))
    store.delete(queue)


def pop_waiting(store: redis.Redis, queue: str) -> bytes | None:
    """Take the next message of ``queue`` out of Redis altogether (a consumer that took it
    and was lost with it)."""
    scratch = f"{queue}@lost:host:0:t:0"
    taken = take_raw(store, queue, scratch)
    store.delete(keys.held(scratch))
    return taken


def rename_waiting(store: redis.Redis, source: str, target: str) -> None:
    """Hand every message waiting for ``source`` to ``target``'s workers, with commands that
    need no memory (``RENAME``): its tokens and its rings, the lanes left where they are."""
    for rank in Rank:
        if store.exists(keys.ring(source, rank)):
            store.rename(keys.ring(source, rank), keys.ring(target, rank))
    if store.exists(source):
        store.rename(source, target)
