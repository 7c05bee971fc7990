"""Request bodies read by pydantic's JSON parser, which holds JSON to its word.

Python's ``json`` module reads ``"\\ud800"`` as a lone surrogate, a string no
UTF-8 encoder will take (a job holding one could be scored but never stored in
Redis); pydantic's parser refuses it as invalid JSON, as RFC 8259 allows, and
is faster. Every route of the API reads its body so (``StrictJSONRoute``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

import pydantic_core
from fastapi import Request, Response
from fastapi.routing import APIRoute


class StrictJSONRequest(Request):
    """A request whose ``json()`` is ``pydantic_core.from_json`` of its body."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = pydantic_core.from_json(body)
            except ValueError as exc:
                # FastAPI answers a JSONDecodeError with a 422 saying what is wrong.
                raise json.JSONDecodeError(str(exc), "", 0) from None
        return self._json


class StrictJSONRoute(APIRoute):
    """A route whose handler reads bodies as ``StrictJSONRequest`` does."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict
