"""One rollout as a trainer or an eval framework hands it over, and its transcript.

TRL passes a prompt and a completion per sample, each either text or a list of
chat messages (``{"role": ..., "content": ...}``), plus the dataset row's
other columns; verl passes the response text with ``data_source``,
``ground_truth`` and ``extra_info``. A ``Sample`` holds either, so the judges,
submissions and transcripts built from it are the same whatever the framework.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from chalk_client.errors import InvalidJobError
from chalk_client.transcript import Message, Transcript

Conversation = str | Sequence[Mapping[str, Any]]
"""Text, or chat messages as OpenAI-style dicts (what TRL's conversational datasets give)."""


@dataclass(frozen=True)
class Sample:
    """One rollout to score: what the model was asked, what it answered, and the row's data."""

    completion: Conversation
    """The model's answer: text, or the messages it produced (assistant and tool turns)."""
    prompt: Conversation | None = None
    """What it was asked, if the framework says (verl's reward functions get no prompt)."""
    columns: Mapping[str, Any] = field(default_factory=dict)
    """The dataset row's other fields: TRL's extra columns (``tests``, ``answer``, ...);
    verl's ``data_source``, ``ground_truth`` and ``extra_info``."""
    index: int = 0
    """Where the sample stands in the batch it came in."""

    @property
    def text(self) -> str:
        """The completion's visible text: the text itself, or its assistant messages' text."""
        if isinstance(self.completion, str):
            return self.completion
        parts: list[str] = []
        for message in messages_from(self.completion, default_role="assistant"):
            if message.role == "assistant":
                parts.extend(message.text_parts())
        return "\n\n".join(parts)

    def column(self, name: str) -> Any:
        """The row's ``name`` field; raises ``InvalidJobError`` naming the fields there are."""
        try:
            return self.columns[name]
        except KeyError:
            there = ", ".join(sorted(self.columns)) or "none"
            raise InvalidJobError(
                f"sample {self.index} has no column {name!r} (it has: {there}); add it to the "
                "dataset or build the job without it"
            ) from None


def _message(data: Mapping[str, Any], default_role: str) -> Message:
    """One chat message as Chalk reads it: tool-call arguments given as objects become JSON."""
    fields = dict(data)
    fields.setdefault("role", default_role)
    calls = fields.get("tool_calls")
    if isinstance(calls, list):
        fixed = []
        for call in calls:
            if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
                function = dict(call["function"])
                if not isinstance(function.get("arguments", ""), str):
                    function["arguments"] = json.dumps(function["arguments"])
                call = {**call, "function": function}
            fixed.append(call)
        fields["tool_calls"] = fixed
    return Message.model_validate(fields)


def messages_from(conversation: Conversation, *, default_role: str) -> list[Message]:
    """``conversation`` as Chalk messages: text becomes one message with ``default_role``.

    Raises ``InvalidJobError`` for anything else than text or a list of message dicts.
    """
    if isinstance(conversation, str):
        return [Message(role=default_role, content=conversation)]
    if not isinstance(conversation, Sequence) or not all(
        isinstance(item, Mapping) for item in conversation
    ):
        raise InvalidJobError(
            "a prompt or completion must be text or a list of chat messages (dicts with "
            f'"role" and "content"), not {type(conversation).__name__}'
        )
    try:
        return [_message(item, default_role) for item in conversation if isinstance(item, Mapping)]
    except ValidationError as exc:
        raise InvalidJobError(f"a chat message is not valid: {exc}") from exc


def default_transcript(sample: Sample) -> Transcript:
    """The prompt (as user text, or its messages) followed by the completion's messages."""
    messages: list[Message] = []
    if sample.prompt is not None:
        messages.extend(messages_from(sample.prompt, default_role="user"))
    messages.extend(messages_from(sample.completion, default_role="assistant"))
    return Transcript(messages=messages)
