"""Rubric contexts rendered into the text the LLM sees, joined with blank lines.

Rendering reads the student's saved files, so it treats them as hostile: a path
must stay inside the submission folder, a link out of it or a special file is
misbehaviour, long files are cut with a visible marker and a missing file is
shown as missing. With no context at all, the LLM sees the transcript.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from chalk_client.custom import RubricContext, registered_context
from chalk_client.errors import ChalkError, ContextError, StudentMisbehaviorError, UnknownJudgeError
from chalk_client.judge_specs import (
    ContextSpec,
    CustomContext,
    FileContext,
    FinalMessageContext,
    TextContext,
    TranscriptContext,
)
from chalk_client.transcript import (
    ImageBlock,
    Message,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Transcript,
)
from chalk_worker.judges.tasks_loader import failures_note


def render_contexts(
    specs: Sequence[ContextSpec],
    transcript: Transcript,
    saved_submissions: tuple[Path, ...],
    submission_dir: Path,
) -> str:
    """Everything the LLM should see for one rubric: each context rendered, blank-line joined."""
    if not specs:
        specs = [TranscriptContext()]
    parts: list[str] = []
    for spec in specs:
        if isinstance(spec, FileContext):
            parts.extend(
                render_file(path, spec.max_bytes, saved_submissions, submission_dir)
                for path in spec.paths
            )
        elif isinstance(spec, TranscriptContext):
            parts.append(render_transcript(transcript, spec))
        elif isinstance(spec, FinalMessageContext):
            parts.append(render_final_message(transcript))
        elif isinstance(spec, TextContext):
            parts.append(spec.text)
        else:
            parts.append(render_custom(spec, transcript, saved_submissions, submission_dir))
    return "\n\n".join(parts)


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def render_file(
    raw: str, max_bytes: int, saved_submissions: tuple[Path, ...], submission_dir: Path
) -> str:
    """One saved file under a header, cut at ``max_bytes`` with a marker; no link leads out."""
    if "{submission}" in raw and not saved_submissions:
        raise ContextError(
            f"FileContext path {raw!r} uses {{submission}} but the step has no submission file"
        )
    first = str(saved_submissions[0]) if saved_submissions else ""
    filled = raw.replace("{submission_dir}", str(submission_dir)).replace("{submission}", first)
    folder = Path(os.path.normpath(submission_dir))
    path = Path(os.path.normpath(folder / filled))
    if not _inside(path, folder) or path == folder:
        raise ContextError(
            f"FileContext path {raw!r} is not a file inside the submission; give paths relative "
            "to the submission, or use {submission} / {submission_dir}"
        )
    label = path.relative_to(folder).as_posix()
    try:
        real = path.resolve()
    except (OSError, RuntimeError) as exc:  # a loop of links
        raise StudentMisbehaviorError(f"{label} could not be resolved: {exc}") from exc
    if not _inside(real, folder.resolve()):
        raise StudentMisbehaviorError(f"{label} leads outside the submission folder (a link)")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        return f"=== file {label}: MISSING (the student did not hand it in) ==="
    except OSError as exc:
        raise StudentMisbehaviorError(
            f"{label} could not be opened safely: {exc.strerror}"
        ) from exc
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        if stat.S_ISDIR(info.st_mode):
            return f"=== {label}: a folder, not a file ==="
        raise StudentMisbehaviorError(f"{label} is not a regular file")
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(max_bytes + 1)
    text = data[:max_bytes].decode("utf-8", errors="replace")
    if len(data) > max_bytes:
        shown = f"only the first {max_bytes} are shown"
        text += f"\n[... CUT: {label} is {info.st_size} bytes; {shown} ...]"
    return f"=== file {label} ({info.st_size} bytes) ===\n{text}\n=== end of file {label} ==="


def _as_text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = [
            item.get("text") if isinstance(item, dict) else getattr(item, "text", None)
            for item in value
        ]
        if all(isinstance(text, str) for text in texts):
            return "\n".join(str(text) for text in texts)
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    return json.dumps(value, ensure_ascii=False, default=str)


def _render_message(message: Message, include_reasoning: bool) -> str:
    header = message.role
    if message.role == "tool":
        header = f"tool result{f' for {message.tool_call_id}' if message.tool_call_id else ''}"
    lines: list[str] = []
    content = message.content
    if isinstance(content, str):
        lines.append(content)
    for block in content if isinstance(content, list) else []:
        if isinstance(block, TextBlock):
            lines.append(block.text)
        elif isinstance(block, ReasoningBlock):
            if include_reasoning:
                lines.append(f"[reasoning] {block.text or block.thinking or ''}")
        elif isinstance(block, ImageBlock):
            lines.append("[an image]")
        elif isinstance(block, ToolUseBlock):
            lines.append(f"[tool call {block.name}: {_as_text(block.input)}]")
        elif isinstance(block, ToolResultBlock):
            lines.append(f"[tool result: {_as_text(block.content)}]")
        else:
            lines.append(f"[a {block.type} block]")
    for call in message.tool_calls or []:
        lines.append(f"[tool call {call.function.name}: {call.function.arguments}]")
    return f"--- {header} ---\n" + "\n".join(lines)


def render_transcript(transcript: Transcript, spec: TranscriptContext) -> str:
    """The conversation, message by message, tool calls and results included."""
    if not transcript.messages:
        return "=== transcript ===\n(no messages)"
    body = "\n\n".join(
        _render_message(message, spec.include_reasoning) for message in transcript.messages
    )
    if len(body) > spec.max_chars:
        head = spec.max_chars // 2
        tail = spec.max_chars - head
        cut = len(body) - spec.max_chars
        body = (
            f"{body[:head]}\n\n[... CUT: {cut} characters of the transcript ...]\n\n{body[-tail:]}"
        )
    return f"=== transcript ===\n{body}\n=== end of transcript ==="


def render_final_message(transcript: Transcript) -> str:
    """The student's last assistant message that has text."""
    for message in reversed(transcript.messages):
        if message.role == "assistant" and message.text_parts():
            text = "\n\n".join(message.text_parts())
            return f"=== the student's final message ===\n{text}\n=== end of final message ==="
    return "=== the student's final message: NONE (the student sent no text) ==="


def render_custom(
    spec: CustomContext,
    transcript: Transcript,
    saved_submissions: tuple[Path, ...],
    submission_dir: Path,
) -> str:
    """A registered ``RubricContext``, built from its params, rendering the transcript."""
    try:
        factory = registered_context(spec.name)
    except UnknownJudgeError as exc:
        raise UnknownJudgeError(f"{exc}.{failures_note()}") from None
    try:
        instance = factory(**spec.params)
    except TypeError as exc:
        raise ContextError(
            f"rubric context {spec.name!r} did not accept its params: {exc}"
        ) from exc
    if not isinstance(instance, RubricContext):
        raise ContextError(
            f"rubric context {spec.name!r} built a {type(instance).__name__}, not a RubricContext"
        )
    instance.saved_submissions = saved_submissions
    instance.submission_dir = submission_dir
    try:
        text = instance.render(transcript)
    except ChalkError:
        raise
    except Exception as exc:
        raise ContextError(
            f"rubric context {spec.name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(text, str):
        raise ContextError(
            f"rubric context {spec.name!r} returned {type(text).__name__}, not a str"
        )
    return text
