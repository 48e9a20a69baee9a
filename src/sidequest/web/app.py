"""The dashboard as one ASGI app: `create_app()`, to serve alone (`sidequest web`) or to mount.

    from starlette.applications import Starlette
    from starlette.routing import Mount
    from sidequest.web import create_app

    app = Starlette(routes=[Mount("/sidequest", create_app(read_only=True))])

Routes, under the mount point: the pages `/`, `/busy`, `/queues`, `/queues/<name>`, `/retries`,
`/scheduled`, `/dead` (each with `/<key>` for one job), `/jobs/<jid>` (one job, wherever it is),
`/job-metrics`, `/tasks`, `/tasks/<id>`, `/workflows`, `/workflows/<id>`, `/periodic`, and on a
Redis Cluster `/cluster`;
`/api/stats` (what the pages poll), the tasks JSON API (`/tasks/<id>` for non-HTML clients,
`/api/tasks/<id>`), `/metrics` for Prometheus, `/health` for probes, `/static/...`. Every state
change is a POST with a CSRF token, guarded by `security.Guard`, which also does basic auth, the
host's own auth hook (for every path but a GET of `/health`) and read-only mode. In front of it,
with `allowed_hosts` (`sidequest web` always), `hosts.HostCheck` refuses a `Host` name the
dashboard does not answer to (DNS rebinding).
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import redis
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from sidequest.client.sync_client import Client, default_client
from sidequest.errors import RedisUnavailableError
from sidequest.store.connection import mask_url
from sidequest.web import health, outage, prometheus
from sidequest.web.hosts import HostCheck
from sidequest.web.pages import (
    busy,
    cluster,
    dashboard,
    groups,
    job,
    job_metrics,
    periodic,
    queues,
    sets,
    tasks,
    workflows,
)
from sidequest.web.pages import search as search_page
from sidequest.web.render import Renderer
from sidequest.web.security import AuthHook, Guard
from sidequest.web.site import Site

POLL_INTERVAL = 2.0


def create_app(client: Client | None = None, *, auth: AuthHook | None = None,
               basic_auth: tuple[str, str] | None = None, read_only: bool = False,
               poll_interval: float = POLL_INTERVAL, allowed_hosts: Sequence[str] | None = None) -> Starlette:
    """The dashboard, on `client` (default: `sidequest.default_client()`).

    - `basic_auth=("admin", "secret")`: every request needs these credentials.
    - `auth=hook`: your application decides, per request; the hook gets the Starlette request
      and returns True (full access), "read-only", False (403), or a Response (say, a redirect
      to your login page). It may be `async`.
    - `read_only=True`: pages show everything and change nothing; every POST gets 403.
    - `poll_interval`: seconds between the pages' live updates.
    - `allowed_hosts=["jobs.example.com"]`: a request for any other `Host` name gets 400 (see
      `hosts`; `sidequest web` always checks). None: the host application checks hosts.
    """
    if poll_interval <= 0:
        raise ValueError("poll_interval must be positive")
    if basic_auth is not None and (len(basic_auth) != 2 or not all(basic_auth)):
        raise ValueError("basic_auth must be a (user, password) pair, both non-empty")
    chosen = _reader(client or default_client())
    renderer = Renderer(poll_interval=poll_interval, redis_label=mask_url(chosen.config.url),
                        cluster=chosen.keys.cluster)
    site = Site(chosen, renderer)
    static = Path(str(resources.files("sidequest.web") / "static"))
    routes: list[BaseRoute] = [
        *dashboard.routes(site),
        *busy.routes(site),
        *groups.routes(site),
        *queues.routes(site),
        *sets.routes(site),
        *search_page.routes(site),
        *job.routes(site),
        *job_metrics.routes(site),
        *tasks.routes(site),
        *workflows.routes(site),
        *periodic.routes(site),
        *(cluster.routes(site) if chosen.keys.cluster else []),
        *prometheus.routes(chosen),
        *health.routes(site),
        Mount("/static", StaticFiles(directory=static), name="static"),
    ]
    redis_down = outage.handler(renderer, chosen.config.url)
    app = Starlette(routes=routes, exception_handlers={redis.RedisError: redis_down,
                                                       RedisUnavailableError: redis_down})
    app.add_middleware(Guard, basic_auth=basic_auth, auth=auth, read_only=read_only)
    if allowed_hosts is not None:  # outermost: a rebound name gets no page, no cookie, no prompt
        app.add_middleware(HostCheck, names=allowed_hosts)
    return app


def _reader(client: Client) -> Client:
    """The client the dashboard reads with: one of its own on the same Redis whose calls give up
    after `outage.PAGE_TIMEOUT` (a page, a scrape or `/health` on a Redis that hangs answers 503
    at once, not after the 30 s a worker's calls may wait); a client given its connection (a
    Cluster or Sentinel client the application made) is used as it is, with its own timeouts."""
    if type(client) is not Client or client.connection_given:
        return client
    return Client(client.config, clock=client.clock, socket_timeout=outage.PAGE_TIMEOUT)
