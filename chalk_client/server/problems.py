"""A request the server refuses, and the JSON that says why."""

from __future__ import annotations

from typing import Any


class Problem(Exception):
    """Refuse the request with ``status``: ``{"error": error, "detail": detail}``."""

    def __init__(self, status: int, error: str, detail: str, **extra: Any) -> None:
        super().__init__(f"{error}: {detail}")
        self.status = status
        self.error = error
        self.detail = detail
        self.extra = extra

    def body(self) -> dict[str, Any]:
        """The response's JSON body."""
        return {"error": self.error, "detail": self.detail, **self.extra}
