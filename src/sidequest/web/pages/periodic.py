"""The Periodic page: every periodic (cron) entry, with its schedule, job, queue, last run and
job, and next run, as `sidequest.periodic.status` reads them: the entries this process
registered, and every entry a worker's scheduler has described in Redis."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sidequest.features.periodic import status
from sidequest.features.periodic.scheduler import DESCRIBE_EVERY
from sidequest.web.site import Site

STALE_AFTER = 3 * DESCRIBE_EVERY  # no scheduler has described the entry for this long


def routes(site: Site) -> list[Route]:
    def listing(request: Request) -> Response:
        now = time.time()
        entries = status(site.client, now=now)
        stale = {e.id for e in entries if e.seen is not None and now - e.seen > STALE_AFTER}
        return site.page(request, "periodic.html", page="periodic", title="Periodic", entries=entries,
                         stale=stale, now=now)

    return [Route("/periodic", listing, name="periodic")]
