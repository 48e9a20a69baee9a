"""What every route answers when Redis does not (refused, or hanging: the dashboard's client gives
up after `PAGE_TIMEOUT`, see `app.create_app`), from one exception handler: a page saying so for
a browser, 503 text for Prometheus' `/metrics`, 503 JSON for everything else (`/api/stats`, the
tasks API, `/health`'s callers), each with `Retry-After`. A scrape or a page is answered within
the probes' bound, never after a worker's 30 s socket timeout."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import redis
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response

from sidequest.api.health import DEFAULT_TIMEOUT
from sidequest.store.reasons import reason
from sidequest.store.redaction import redact
from sidequest.web.render import Renderer

PAGE_TIMEOUT = DEFAULT_TIMEOUT  # seconds one Redis call of the dashboard may wait
RETRY_AFTER = 5  # seconds

log = logging.getLogger(__name__)


def handler(renderer: Renderer, url: str) -> Callable[[Request, Exception], Awaitable[Response]]:
    """The handler of redis.RedisError and RedisUnavailableError for the dashboard on `url`."""

    async def redis_down(request: Request, exc: Exception) -> Response:
        log.warning("dashboard: Redis error on %s: %s", request.url.path, redact(reason(exc), url))
        why = "it did not answer in time" if isinstance(exc, redis.TimeoutError) else type(exc).__name__
        headers = {"Retry-After": str(RETRY_AFTER), "Cache-Control": "no-store"}
        if "text/html" in request.headers.get("accept", ""):
            return HTMLResponse(renderer.unavailable(request, why, RETRY_AFTER), 503, headers)
        if request.url.path.endswith("/metrics"):
            return PlainTextResponse(f"Redis does not answer ({why})\n", 503, headers)
        return JSONResponse({"error": "Redis does not answer", "reason": why}, 503, headers)

    return redis_down
