"""Small builders shared by the tests."""

from __future__ import annotations

from chalk_client import Message, Transcript


def say(*texts: str) -> Transcript:
    """A transcript in which the assistant said each text, in order."""
    return Transcript(messages=[Message(role="assistant", content=text) for text in texts])
