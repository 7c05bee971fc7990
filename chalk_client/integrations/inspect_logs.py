"""inspect_ai's messages and eval logs as Chalk transcripts and jobs.

An inspect sample's messages become OpenAI-style message dicts (what Chalk's
``Message`` reads): text and reasoning blocks are kept, tool calls and tool
results too; images, audio, video, documents and data blocks keep only their
type (their payloads can be megabytes of base64, and no judge reads them).
``jobs_from_log`` reads an eval log (``.eval`` or ``.json``) sample by sample,
for ``chalk score --from-inspect LOG``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from typing import Any

from pydantic import ValidationError

from chalk_client.errors import InvalidJobError, MissingExtraError
from chalk_client.integrations.samples import messages_from
from chalk_client.jobs import ScoringJob
from chalk_client.rollouts import BadLine, DefaultJudge, describe_errors, stable_id
from chalk_client.submission import Submission
from chalk_client.transcript import Transcript

try:
    from inspect_ai.log import EvalSample, read_eval_log, read_eval_log_samples
    from inspect_ai.model import ChatMessage, Content
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError(
        "reading inspect_ai samples and logs needs inspect_ai: pip install 'chalk-queue[inspect]'"
    ) from exc

ANSWER_FILE = "answer.txt"
"""The file that holds a logged sample's final answer (``output.completion``)."""


def _block(content: Content) -> dict[str, Any]:
    if content.type == "text":
        return {"type": "text", "text": content.text}
    if content.type == "reasoning":
        return {"type": "reasoning", "text": content.reasoning}
    return {"type": content.type}


def message_dicts(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """inspect's chat messages as OpenAI-style dicts, in order (see the module's docstring)."""
    converted: list[dict[str, Any]] = []
    for message in messages:
        content = message.content
        item: dict[str, Any] = {
            "role": message.role,
            "content": content if isinstance(content, str) else [_block(c) for c in content],
        }
        if message.role == "assistant" and message.tool_calls:
            item["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.function, "arguments": json.dumps(call.arguments)},
                }
                for call in message.tool_calls
            ]
        if message.role == "tool":
            item["tool_call_id"] = message.tool_call_id
            if message.function:
                item["name"] = message.function
        converted.append(item)
    return converted


def transcript_of(messages: Sequence[ChatMessage]) -> Transcript:
    """inspect's chat messages as a Chalk transcript."""
    return Transcript(messages=messages_from(message_dicts(messages), default_role="assistant"))


def _job(
    sample: EvalSample, eval_id: str, task: str, model: str, judge: DefaultJudge
) -> ScoringJob:
    key = f"inspect:{eval_id}:{sample.id}:{sample.epoch}"
    target = sample.target if isinstance(sample.target, str) else list(sample.target)
    metadata: dict[str, Any] = {
        "inspect_task": task,
        "inspect_eval_id": eval_id,
        "inspect_model": model,
        "sample_id": sample.id,
        "epoch": sample.epoch,
        "target": target,
    }
    if sample.error is not None:
        metadata["inspect_error"] = sample.error.message
    if sample.metadata:
        metadata["sample_metadata"] = sample.metadata
    return ScoringJob(
        id=stable_id(key, judge.canonical),
        transcript=transcript_of(sample.messages),
        judge=judge.judge,
        steps=judge.steps,
        submission=Submission.from_files({ANSWER_FILE: sample.output.completion}),
        metadata=metadata,
    )


def jobs_from_log(
    path: str | os.PathLike[str], judge: DefaultJudge
) -> Iterator[ScoringJob | BadLine]:
    """One job per sample (and epoch) of an inspect eval log, scored with ``judge``.

    Each job's transcript is the sample's messages; its submission the final
    answer as ``answer.txt``; its metadata the task, eval id, model, sample id,
    epoch, target and the sample's own metadata. Its id is derived from the
    eval id, sample id, epoch and judge, so scoring the log again with the same
    ``--out`` skips what was scored. A sample that makes no valid job is a
    ``BadLine`` numbered by its place in the log. Raises ``InvalidJobError`` if
    the log cannot be read.
    """
    where = os.fspath(path)
    try:
        header = read_eval_log(where, header_only=True)
        samples = read_eval_log_samples(where, all_samples_required=False, resolve_attachments=True)
    except Exception as exc:  # a missing file, not a log, a log of another version...
        raise InvalidJobError(f"could not read the inspect log {path}: {exc}") from exc
    eval_id, task, model = header.eval.eval_id, header.eval.task, header.eval.model
    number = 0
    while True:
        try:
            sample = next(samples, None)
        except Exception as exc:
            raise InvalidJobError(
                f"could not read sample {number + 1} of the inspect log {path}: {exc}"
            ) from exc
        if sample is None:
            return
        number += 1
        try:
            yield _job(sample, eval_id, task, model, judge)
        except ValidationError as exc:
            yield BadLine(number, f"sample {sample.id!r}: {describe_errors(exc)}")
        except InvalidJobError as exc:
            yield BadLine(number, f"sample {sample.id!r}: {exc}")
