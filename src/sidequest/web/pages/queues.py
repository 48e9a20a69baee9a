"""The Queues pages: every queue with its size and latency; one queue's jobs, page by page; pause,
resume, clear, and deleting one job. Each read is one page of the list (LRANGE) and its length.
A queue with lanes also shows its largest groups (pause, resume and reset each) and its jobs waiting
per priority level (`api.groups`), a few round trips whatever the number of groups."""

from __future__ import annotations

from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from sidequest.api import Queue, Stats, groups, lanes, pause_group, reset_group, resume_group
from sidequest.web.render import back
from sidequest.web.site import PER_PAGE, Site, field, pager, whole

GROUPS_SHOWN = 50  # the largest groups (waiting + running) a queue's page lists


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
        return site.page(request, "queue.html", page="queues", title=f"Queue {queue.name}", name=queue.name,
                         size=size, latency=queue.latency, paused=queue.paused, jobs=jobs, pager=paging,
                         groups=groups(queue.name, GROUPS_SHOWN, site.client), groups_shown=GROUPS_SHOWN,
                         levels=lanes(queue.name, site.client))

    def act_on_group(request: Request) -> Response:
        name, group, action = field(request, "name"), field(request, "group"), field(request, "do")
        if not name or not group:
            return PlainTextResponse("no queue or group named", status_code=400)
        here = f"/queues/{quote(name, safe='')}"
        if action == "pause":
            pause_group(name, group, site.client)
            return back(request, here, f"Paused group {group}: no more of its jobs are staged into {name}.")
        if action == "resume":
            resume_group(name, group, site.client)
            return back(request, here, f"Resumed group {group}.")
        if action == "reset":
            held = reset_group(name, group, site.client)
            return back(request, here, f"Reset group {group}: gave back {held:,} slot{'s' if held != 1 else ''}; "
                                       "its jobs still running go on.")
        return PlainTextResponse(f"unknown action {action!r}", status_code=400)

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
        Route("/queues/group-actions", act_on_group, methods=["POST"]),
        Route("/queues/{name:path}", one),
    ]
