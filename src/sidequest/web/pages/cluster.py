"""The Cluster page (on a Redis Cluster only): each primary with its replicas, slots, keys and
memory, and which primary holds which queue, as `api.Cluster` reads them."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sidequest.api import Cluster, Stats
from sidequest.web.site import Site


def routes(site: Site) -> list[Route]:
    def page(request: Request) -> Response:
        cluster = Cluster(site.client)
        stats = Stats(site.client)
        sizes = {q.name: q.size for q in stats.queue_summaries}
        return site.page(request, "cluster.html", page="cluster", title="Cluster", stats=stats, cluster=cluster,
                         sizes=sizes)

    return [Route("/cluster", page, name="cluster")]
