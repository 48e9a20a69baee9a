"""`GET /health`: 200 and `{"status": "ok", "redis": "ok"}` while Redis answers the dashboard, 503
and `{"status": "unavailable", "redis": "<why>"}` when it does not (within the probes' 2 s, even
when Redis hangs: the dashboard's client gives up by then, see `outage`); for a load balancer's or
Kubernetes' HTTP probe. It needs no login (`security.Guard` lets a GET of it through), so it says
what a prober needs and nothing more: no URL, no credential. It reads nothing but a PING's answer."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sidequest.api.health import check_redis
from sidequest.web.site import Site

PATH = "/health"


def routes(site: Site) -> list[Route]:
    def health(request: Request) -> Response:
        # PING only: a read-only dashboard may use a Redis user that may not write
        verdict = check_redis(site.client, write=False)
        body = {"status": "ok", "redis": "ok"} if verdict.ok else {"status": "unavailable", "redis": verdict.reason}
        return JSONResponse(body, status_code=200 if verdict.ok else 503, headers={"Cache-Control": "no-store"})

    return [Route(PATH, health, methods=["GET"])]
