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
    TestsJudge,
    TextContext,
    TranscriptContext,
)
from chalk_client.program_tests import Checker, FloatTolerance, TestCase

__all__ = [
    "AllJudge",
    "AlwaysPassJudge",
    "AnyJudge",
    "Checker",
    "ContextSpec",
    "Criterion",
    "CustomContext",
    "CustomJudge",
    "ExecutableJudge",
    "FileContext",
    "FinalMessageContext",
    "FloatTolerance",
    "Judge",
    "JudgeSpec",
    "RegexJudge",
    "RubricContext",
    "RubricJudge",
    "StudentMisbehaviorError",
    "TestCase",
    "TestsJudge",
    "TextContext",
    "TranscriptContext",
    "register_context",
    "register_judge",
]
