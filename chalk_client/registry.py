"""``Registry``: things registered by name, rebuilt from plain data (``name`` + ``params``).

One type serves every registry of the project: custom judges and rubric
contexts (``chalk_client.custom``, filled by task packages on the worker) and
the worker's evaluator per judge ``type`` (``chalk_worker.judges.base``).
Looking up a name nobody registered raises ``UnknownJudgeError`` listing the
names that are registered and how to register one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from chalk_client.errors import UnknownJudgeError

T = TypeVar("T")
_F = TypeVar("_F")


class Registry(Generic[T]):
    """Things of one kind (``what``), by name; ``how`` says how to register one."""

    def __init__(self, what: str, how: str) -> None:
        self.what = what
        self.how = how
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[_F], _F]:
        """A decorator that registers what it decorates under ``name`` (the last one wins)."""

        def decorate(thing: _F) -> _F:
            self._entries[name] = thing  # type: ignore[assignment]
            return thing

        return decorate

    def __getitem__(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(sorted(self._entries)) or "none"
            raise UnknownJudgeError(
                f"no {self.what} named {name!r} is registered on this worker "
                f"(registered: {known}); {self.how}"
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)
