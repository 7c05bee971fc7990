"""What every route shares: the queue, the limits; and the JSON answer they give."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fastapi import Request, Response

from chalk_client.server.queues import ServerQueue
from chalk_client.server.settings import ServerSettings
from chalk_client.settings import ChalkSettings


@dataclass
class ServerState:
    """The server's queue and settings, kept on the app (``app.state.chalk``)."""

    queue: ServerQueue
    limits: ServerSettings
    settings: ChalkSettings


def state_of(request: Request) -> ServerState:
    """The ``ServerState`` of the app serving ``request``."""
    state: ServerState = request.app.state.chalk
    return state


def json_response(body: Any, status: int = 200) -> Response:
    """``body`` as JSON (compact, UTF-8), without FastAPI's encoder pass."""
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return Response(data.encode(), status_code=status, media_type="application/json")
