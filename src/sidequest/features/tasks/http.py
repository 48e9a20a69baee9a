"""The JSON HTTP API of tasks, for front ends that poll a task id.

    GET /tasks/<id>                                   the task's status (404 if unknown)
    GET /tasks/<id>/events?status=failed&offset=0&limit=50

An ASGI app: mount it in your own Starlette/FastAPI app (`Mount("/jobs", tasks_app(client))`),
or run it alone with `sidequest web`. The handlers are plain functions: they call Redis through
the blocking client, so Starlette runs them in its thread pool, and a slow Redis call holds up
its own request only, never the event loop.
"""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from sidequest.client.sync_client import Client, default_client
from sidequest.features.tasks.task import Task

MAX_LIMIT = 500


def tasks_app(client: Client | None = None) -> Starlette:
    def find(request: Request) -> Task | None:
        return Task.find(request.path_params["task_id"], client=client or default_client())

    def status(request: Request) -> JSONResponse:
        task = find(request)
        if task is None:
            return JSONResponse({"error": "no such task (it may have expired)"}, status_code=404)
        return JSONResponse(task.status())

    def events(request: Request) -> JSONResponse:
        task = find(request)
        if task is None:
            return JSONResponse({"error": "no such task (it may have expired)"}, status_code=404)
        query = request.query_params
        try:
            offset = _whole(query, "offset", 0)
            limit = min(_whole(query, "limit", 50), MAX_LIMIT)
            listed = task.events(status=query.get("status") or None, offset=offset, limit=limit)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse({"task_id": task.id, "offset": offset, "limit": limit, "events": listed})

    return Starlette(routes=[
        Route("/tasks/{task_id}", status),
        Route("/tasks/{task_id}/events", events),
    ])


def _whole(query: Any, name: str, default: int) -> int:
    """A whole-number query parameter, or a ValueError that says which and what it got."""
    raw = query.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, got {raw!r}") from None
