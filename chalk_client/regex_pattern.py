"""A regular expression as a pydantic field: compiled in Python, pattern and flags in JSON.

``RegexPattern`` takes a pattern string, a compiled ``str`` pattern or
``{"pattern": ..., "flags": ...}``, where the flags are an int or names
(``["IGNORECASE", "MULTILINE"]``, or ``"IGNORECASE|MULTILINE"``), and
validates it into a compiled pattern; an invalid expression is a validation
error that says why. Only the flags that change what a pattern matches are
taken (those named, and ``UNICODE``, a ``str`` pattern's default): ``re.DEBUG``
would print every compile to the worker's output, and ``re.TEMPLATE`` warns that
it is deprecated. It is written back as the pattern string alone when it has
no flags, else with the flags by name, so a judge's patterns survive the trip
to the workers.
"""

import re
from typing import Annotated, Any

from pydantic import PlainSerializer, WithJsonSchema
from pydantic.functional_validators import BeforeValidator

_FLAG_NAMES: dict[str, re.RegexFlag] = {
    "ASCII": re.ASCII,
    "IGNORECASE": re.IGNORECASE,
    "MULTILINE": re.MULTILINE,
    "DOTALL": re.DOTALL,
    "VERBOSE": re.VERBOSE,
}
_TAKEN = int(re.UNICODE | sum(_FLAG_NAMES.values()))
"""Every flag a pattern may have: those named, and UNICODE (a str pattern's default)."""


def _taken(flags: int) -> int:
    """``flags``, if they are all flags a judge's pattern may have."""
    if flags & ~_TAKEN:
        names = ", ".join(sorted(_FLAG_NAMES))
        raise ValueError(
            f"regex flags {flags} hold flags a judge's pattern may not have (re.DEBUG prints "
            f"every compile, re.TEMPLATE is deprecated); use {names}, by name or as their sum"
        )
    return flags


def _parse_flags(flags: Any) -> int:
    if isinstance(flags, bool):
        raise ValueError("regex flags must be an int or a list of names, not a bool")
    if isinstance(flags, int):
        return _taken(flags)
    if isinstance(flags, str):
        flags = [part for part in re.split(r"[|,\s]+", flags) if part]
    if isinstance(flags, list):
        value = 0
        for name in flags:
            key = str(name).upper().removeprefix("RE.")
            if key not in _FLAG_NAMES:
                known = ", ".join(sorted(_FLAG_NAMES))
                raise ValueError(f"unknown regex flag {name!r}; use one of {known}")
            value |= _FLAG_NAMES[key]
        return value
    raise ValueError(f"regex flags must be an int or a list of names, got {flags!r}")


def _to_pattern(value: Any) -> re.Pattern[str]:
    if isinstance(value, re.Pattern):
        if not isinstance(value.pattern, str):
            raise ValueError("regex patterns must be str patterns, not bytes")
        _taken(value.flags)
        return value
    try:
        if isinstance(value, str):
            return re.compile(value)
        if isinstance(value, dict) and isinstance(value.get("pattern"), str):
            return re.compile(value["pattern"], _parse_flags(value.get("flags", 0)))
    except re.error as exc:
        raise ValueError(f"invalid regular expression {value!r}: {exc}") from exc
    except (OverflowError, TypeError) as exc:  # flags out of range, say
        raise ValueError(f"invalid regular expression {value!r:.200}: {exc}") from exc
    except RecursionError:  # re's parser recurses once per group: ~500 nested ones
        raise ValueError(
            f"invalid regular expression {value!r:.200}: its groups nest too deeply for "
            "Python's re to compile it; nest them less"
        ) from None
    raise ValueError(
        f'a regex pattern is a string, a compiled str pattern or {{"pattern", "flags"}}; '
        f"got {value!r:.80}"
    )


def _dump_pattern(pattern: re.Pattern[str]) -> str | dict[str, Any]:
    flags = pattern.flags & ~re.UNICODE
    if not flags:
        return pattern.pattern
    return {
        "pattern": pattern.pattern,
        "flags": [n for n, bit in _FLAG_NAMES.items() if flags & bit],
    }


RegexPattern = Annotated[
    re.Pattern[str],
    BeforeValidator(_to_pattern),
    PlainSerializer(_dump_pattern),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string"},
                {
                    "type": "object",
                    "properties": {"pattern": {"type": "string"}, "flags": {}},
                    "required": ["pattern"],
                },
            ]
        }
    ),
]
"""A compiled ``str`` pattern; JSON is the pattern string, or ``{"pattern", "flags"}``."""
