"""Main fields by position: the constructors of the judge and context specs and of ``Step``.

Pydantic models take keyword arguments only. These models take their main
fields by position as well, as DESIGN names them
(``ExecutableJudge(command, continue_threshold, ...)``): their ``__init__``
lists those fields with ``UNSET`` as the default and hands them to pydantic
through ``with_positional``, so a field not given keeps its own default and
pydantic validates the others like any keyword argument.
"""

from typing import Any


class _Unset:
    """The default of a constructor argument not given: the field keeps its own default."""

    def __repr__(self) -> str:
        return "<default>"


UNSET: Any = _Unset()
"""The default of a constructor argument not given: the field keeps its own default."""


def with_positional(data: dict[str, object], **arguments: object) -> dict[str, object]:
    """``data`` (a constructor's keyword arguments) with the arguments given by position added.

    Arguments left ``UNSET`` are not added; pydantic validates the others like
    any other field.
    """
    data.update((name, value) for name, value in arguments.items() if value is not UNSET)
    return data
