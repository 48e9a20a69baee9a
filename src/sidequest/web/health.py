"""`GET /health`: 200 and `{"status": "ok", ...}` while Redis answers the dashboard, 503 with the
reason when it does not (within the probes' 2 s, even when Redis hangs); for a load balancer's or
Kubernetes' HTTP probe. It needs no login
(`security.Guard` lets a GET of it through) and reads nothing but a PING's answer."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sidequest.api.health import check_redis, probe_client
from sidequest.client.sync_client import Client
from sidequest.web.site import Site

PATH = "/health"


def routes(site: Site) -> list[Route]:
    probes: list[Client] = []

    def prober() -> Client:
        """A client that gives up after the probes' short timeout (`probe_client`), on the
        dashboard's Redis; the dashboard's own client when it was given a connection (a Cluster
        or Sentinel client, made by the app) that its URL does not describe."""
        if site.client.connection_given:
            return site.client
        if not probes:
            probes.append(probe_client(site.client.config))
        return probes[0]

    def health(request: Request) -> Response:
        # PING only: a read-only dashboard may use a Redis user that may not write
        verdict = check_redis(prober(), write=False)
        body = {"status": "ok", "redis": "ok"} if verdict.ok else {"status": "unavailable", "redis": verdict.reason}
        return JSONResponse(body, status_code=200 if verdict.ok else 503, headers={"Cache-Control": "no-store"})

    return [Route(PATH, health, methods=["GET"])]
