"""The transcript of one agent run: its messages and its raw events.

Messages accept the shapes agents actually produce: plain string content, lists
of content blocks (Anthropic style: text, reasoning/thinking, image, tool_use,
tool_result), OpenAI-style ``tool_calls`` and ``role="tool"`` results. Fields
this module does not know are kept as they came, so a transcript round-trips
through JSON unchanged.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    Tag,
    field_validator,
    model_serializer,
    model_validator,
)


def check_json_numbers(value: object) -> None:
    """Raise ``ValueError`` if ``value`` holds a number JSON cannot carry (NaN, Infinity).

    Python reads and writes such numbers, but JSON has none: written out they
    would become ``null``, so a job would change on its way to a worker. Dicts,
    lists, tuples and models (their fields and extra fields) are searched; the
    error names the place inside ``value``, e.g. ``runs[2].loss``.
    """
    stack: list[tuple[object, str]] = [(value, "")]
    seen: set[int] = set()
    while stack:
        item, path = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                place = f" (at {path})" if path else ""
                raise ValueError(
                    f"{item} is not a number JSON can carry{place}; use a finite number, "
                    "a string or null"
                )
            continue
        if not isinstance(item, (BaseModel, dict, list, tuple)) or id(item) in seen:
            continue  # a scalar, or a structure that contains itself: nothing new
        seen.add(id(item))
        if isinstance(item, BaseModel):
            item = {**item.__dict__, **(item.__pydantic_extra__ or {})}
        if isinstance(item, dict):
            prefix = f"{path}." if path else ""
            keys = (key for key in item if isinstance(key, float))
            stack.extend((key, f"a key of {path or 'the value'}") for key in keys)
            stack.extend((child, f"{prefix}{key}") for key, child in item.items())
        else:
            stack.extend((child, f"{path}[{index}]") for index, child in enumerate(item))


def _all_finite(value: object) -> bool:
    """``check_json_numbers``'s quick first look: ``False`` means "look closer"."""
    if isinstance(value, (str, int)) or value is None:
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(map(_all_finite, value.values())) and all(map(_all_finite, value))
    if isinstance(value, (list, tuple)):
        return all(map(_all_finite, value))
    return not isinstance(value, BaseModel)


def _json_data(value: object) -> object:
    try:
        finite = _all_finite(value)
    except RecursionError:  # deep, or containing itself: the careful walk copes
        finite = False
    if not finite:
        check_json_numbers(value)
    return value


JsonData = Annotated[Any, AfterValidator(_json_data)]
"""Any value that JSON can carry as it is: no NaN or Infinity anywhere in it."""


class _Open(BaseModel):
    """A model that keeps fields it does not know, as long as JSON can carry them."""

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="after")
    def _json_extra(self) -> Self:
        if self.__pydantic_extra__:
            _json_data(self.__pydantic_extra__)
        return self


class _Block(_Open):
    @model_serializer(mode="wrap")
    def _keep_type(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            return {"type": getattr(self, "type"), **data}  # noqa: B009
        return data


class TextBlock(_Block):
    """Visible text the speaker wrote."""

    type: Literal["text"] = "text"
    text: str = ""


class ReasoningBlock(_Block):
    """Private reasoning (``reasoning`` or Anthropic's ``thinking``); never graded as an answer."""

    type: Literal["reasoning", "thinking"] = "reasoning"
    text: str | None = None
    thinking: str | None = None


class ImageBlock(_Block):
    """An image; its payload fields are kept as given."""

    type: Literal["image"] = "image"


class ToolUseBlock(_Block):
    """A tool call written as a content block."""

    type: Literal["tool_use"] = "tool_use"
    name: str = ""
    input: JsonData = None
    id: str | None = None


class ToolResultBlock(_Block):
    """What a tool returned, as a content block."""

    type: Literal["tool_result"] = "tool_result"
    content: JsonData = None
    tool_use_id: str | None = None


class OtherBlock(_Block):
    """A block of a type this version does not know; kept, never graded as text."""

    type: str


_KNOWN_BLOCKS = {"text", "reasoning", "thinking", "image", "tool_use", "tool_result"}


def _block_tag(value: object) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    if kind in ("reasoning", "thinking"):
        return "reasoning"
    return kind if isinstance(kind, str) and kind in _KNOWN_BLOCKS else "other"


ContentBlock = Annotated[
    Annotated[TextBlock, Tag("text")]
    | Annotated[ReasoningBlock, Tag("reasoning")]
    | Annotated[ImageBlock, Tag("image")]
    | Annotated[ToolUseBlock, Tag("tool_use")]
    | Annotated[ToolResultBlock, Tag("tool_result")]
    | Annotated[OtherBlock, Tag("other")],
    Discriminator(_block_tag),
]
"""One block of multipart message content, chosen by its ``type``."""


class FunctionCall(_Open):
    """The function part of an OpenAI tool call; ``arguments`` is the raw JSON string."""

    name: str
    arguments: str = ""


class ToolCall(_Open):
    """An OpenAI-style tool call carried by an assistant message."""

    id: str | None = None
    type: str = "function"
    function: FunctionCall


class Message(_Open):
    """One message of the conversation.

    ``role`` is ``system``, ``user``, ``assistant`` or ``tool`` (other roles are
    kept as given). ``content`` is a string, a list of blocks, or ``None`` for an
    assistant turn that only calls tools.
    """

    role: str
    content: str | list[ContentBlock] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    def text_parts(self) -> list[str]:
        """The visible text of this message: string content, or each text block's text."""
        if self.content is None:
            return []
        if isinstance(self.content, str):
            return [self.content]
        return [block.text for block in self.content if isinstance(block, TextBlock)]


class Transcript(BaseModel):
    """Everything an agent run produced: its messages and its raw event log.

    Events are plain dicts, each with a string ``"type"``.
    """

    messages: list[Message] = Field(default_factory=list)
    events: list[dict[str, JsonData]] = Field(default_factory=list)

    @field_validator("events")
    @classmethod
    def _events_have_a_type(cls, events: list[dict[str, object]]) -> list[dict[str, object]]:
        for index, event in enumerate(events):
            if not isinstance(event.get("type"), str):
                raise ValueError(f'event {index} needs a string "type" field, got {event!r:.80}')
        return events

    def assistant_text(self) -> str:
        """Every piece of assistant text, in order, joined with blank lines.

        System, user and tool messages, tool results, reasoning, tool-call
        arguments and non-text blocks are left out: this is what the student said.
        """
        parts: list[str] = []
        for message in self.messages:
            if message.role == "assistant":
                parts.extend(message.text_parts())
        return "\n\n".join(parts)
