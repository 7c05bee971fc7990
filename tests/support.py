"""Small builders shared by the tests."""

from __future__ import annotations

import redis

from chalk_client import Message, Transcript


def say(*texts: str) -> Transcript:
    """A transcript in which the assistant said each text, in order."""
    return Transcript(messages=[Message(role="assistant", content=text) for text in texts])


def held_count(store: redis.Redis) -> int:
    """Messages workers took from the queue and have not acknowledged (all held lists)."""
    return sum(int(store.llen(key)) for key in store.scan_iter("chalk:held:*", count=1000))
