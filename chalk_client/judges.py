"""The public judge API: judge specs, context providers, and custom judges."""

from chalk_client.custom import (
    Judge,
    RubricContext,
    register_context,
    register_judge,
)
from chalk_client.errors import StudentMisbehaviorError
from chalk_client.judge_specs import (
    AllJudge,
    AlwaysPassJudge,
    AnyJudge,
    ContextSpec,
    Criterion,
    CustomContext,
    CustomJudge,
    ExecutableJudge,
    FileContext,
    FinalMessageContext,
    JudgeSpec,
    RegexJudge,
    RubricJudge,
    TextContext,
    TranscriptContext,
)

__all__ = [
    "AllJudge",
    "AlwaysPassJudge",
    "AnyJudge",
    "ContextSpec",
    "Criterion",
    "CustomContext",
    "CustomJudge",
    "ExecutableJudge",
    "FileContext",
    "FinalMessageContext",
    "Judge",
    "JudgeSpec",
    "RegexJudge",
    "RubricContext",
    "RubricJudge",
    "StudentMisbehaviorError",
    "TextContext",
    "TranscriptContext",
    "register_context",
    "register_judge",
]
