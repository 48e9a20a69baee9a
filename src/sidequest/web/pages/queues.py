"""The Queues pages: every queue with its size and latency; one queue's jobs, page by page; pause,
resume, clear, and deleting one job. Each read is one page of the list (LRANGE) and its length.
A queue with lanes also shows its largest groups (their limits, where each comes from, and the
controls `pages.groups` serves) and its jobs waiting per priority level (`api.groups`)."""

from __future__ import annotations

from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from sidequest.api import Queue, Stats, groups
from sidequest.api.groups import count_levels
from sidequest.web.render import back
from sidequest.web.site import PER_PAGE, Site, field, pager, whole

GROUPS_SHOWN = 50  # the largest groups (waiting + running) a queue's page lists
LEVELS_READ = 10_000  # groups whose lanes a queue's page counts per priority level (a page of 1,000 a round trip)


def routes(site: Site) -> list[Route]:
    def listing(request: Request) -> Response:
        stats = Stats(site.client)
        queues = sorted(stats.queue_summaries, key=lambda q: q.name)
        return site.page(request, "queues.html", page="queues", title="Queues", stats=stats, queues=queues)

    def one(request: Request) -> Response:
        queue = Queue(request.path_params["name"], site.client)
        size = queue.size
        paging = pager(request, size)
        jobs = queue.page(paging.offset, PER_PAGE) if size else []
        levels, unread = count_levels(queue.name, LEVELS_READ, site.client)
        return site.page(request, "queue.html", page="queues", title=f"Queue {queue.name}", name=queue.name,
                         size=size, latency=queue.latency, paused=queue.paused, jobs=jobs, pager=paging,
                         groups=groups(queue.name, GROUPS_SHOWN, site.client), groups_shown=GROUPS_SHOWN,
                         levels=levels, levels_unread=unread, levels_read=LEVELS_READ)

    def act(request: Request) -> Response:
        name, action = field(request, "name"), field(request, "do")
        if not name:
            return PlainTextResponse("no queue named", status_code=400)
        queue = Queue(name, site.client)
        here = f"/queues/{quote(name, safe='')}" if field(request, "from") == "queue" else "/queues"
        if action == "pause":
            queue.pause()
            return back(request, here, f"Paused {name}: workers take no new jobs from it.")
        if action == "unpause":
            queue.unpause()
            return back(request, here, f"Resumed {name}.")
        if action == "clear":
            deleted = queue.clear()
            return back(request, here, f"Cleared {name}: deleted {deleted:,} job{'s' if deleted != 1 else ''}.")
        if action == "delete":
            page = whole(field(request, "page"), 1)
            here = f"/queues/{quote(name, safe='')}?page={page}"
            jid = field(request, "jid")
            if not jid:
                return PlainTextResponse("no job named", status_code=400)
            job = queue.find_job(jid)
            if job is not None and job.delete():
                return back(request, here, "Deleted 1 job.")
            return back(request, here, "That job had already left the queue (a worker took it, or it was deleted).",
                        "info")
        return PlainTextResponse(f"unknown action {action!r}", status_code=400)

    return [
        Route("/queues", listing, name="queues"),
        Route("/queues/actions", act, methods=["POST"]),
        Route("/queues/{name:path}", one),
    ]
