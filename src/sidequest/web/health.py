"""`GET /health`: 200 and `{"status": "ok", ...}` while Redis answers the dashboard, 503 with the
reason when it does not (within the probes' 2 s, even when Redis hangs); for a load balancer's or
Kubernetes' HTTP probe. It needs no login
(`security.Guard` lets a GET of it through) and reads nothing but a PING's answer."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sidequest.api.health import Readiness, check_redis
from sidequest.web.site import Site

PATH = "/health"


def routes(site: Site) -> list[Route]:
    # PING only: a read-only dashboard may use a Redis user that may not write. Its own client,
    # with the probes' short timeouts, from the dashboard's URL; a dashboard given a connection
    # (a Cluster or Sentinel client the app made) that its URL does not describe checks that one.
    readiness = Readiness(site.client.config, also=lambda: None, write=False)

    def health(request: Request) -> Response:
        verdict = check_redis(site.client, write=False) if site.client.connection_given else readiness()
        body = {"status": "ok", "redis": "ok"} if verdict.ok else {"status": "unavailable", "redis": verdict.reason}
        return JSONResponse(body, status_code=200 if verdict.ok else 503, headers={"Cache-Control": "no-store"})

    return [Route(PATH, health, methods=["GET"])]
