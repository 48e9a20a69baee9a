"""The Tasks pages: a task's progress, its counts per status and its jobs' events with messages,
filtered by status and paged; and a way in (by id, or from the tasks whose jobs are in sight).

`/tasks/<id>` and `/tasks/<id>/events` keep answering JSON (`sidequest.tasks_http`) to any client
that does not ask for HTML, so front ends polling the tasks API see no change; the same API is
also at `/api/tasks/<id>`.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from .. import keys
from ..api import DeadSet, RetrySet, Workers
from ..tasks import Task
from ..tasks_http import tasks_app
from .render import FRAGMENT_HEADER, back
from .site import Site, pager

EVENTS_PER_PAGE = 25
SEEN_LIMIT = 20  # tasks listed on /tasks
LOOK = 100  # newest retries and dead entries looked at for task ids
RECENT_COOKIE = "sidequest_tasks"  # the task ids this browser opened last, newest first
RECENT_LIMIT = 10
TASK_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")


def wants_html(request: Request) -> bool:
    return "text/html" in request.headers.get("accept", "") or bool(request.headers.get(FRAGMENT_HEADER))


class Negotiated:
    """HTML for browsers, the tasks JSON API for everyone else, on one path."""

    def __init__(self, html: Any, json_app: ASGIApp) -> None:
        self.html = html
        self.json_app = json_app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        if not wants_html(request):
            await self.json_app(scope, receive, send)
            return
        response = await run_in_threadpool(self.html, request)
        await response(scope, receive, send)


def _recent(request: Request) -> list[str]:
    raw = request.cookies.get(RECENT_COOKIE, "")
    return [t for t in raw.split(".") if TASK_ID.fullmatch(t)][:RECENT_LIMIT]


def _seen_task_ids(site: Site, request: Request) -> list[str]:
    """The tasks this browser opened last, then those of the jobs running now and of the newest
    retries and dead jobs (bounded reads: the tasks API keeps no list of tasks)."""
    found: dict[str, None] = dict.fromkeys(_recent(request))
    items = [work.job.item for work in Workers(site.client)]
    items += [entry.item for entry in RetrySet(site.client).page(0, LOOK)]
    items += [entry.item for entry in DeadSet(site.client).page(0, LOOK)]
    for item in items:
        task_id = item.get("task_id")
        if isinstance(task_id, str) and task_id:
            found[task_id] = None
    return list(found)[:SEEN_LIMIT]


def routes(site: Site) -> list[Route | Mount]:
    json_api = tasks_app(site.client)

    def index(request: Request) -> Response:
        wanted = request.query_params.get("id", "").strip()
        if wanted:
            if Task.find(wanted, client=site.client) is not None:
                root = request.scope.get("root_path", "")
                return RedirectResponse(f"{root}/tasks/{quote(wanted, safe='')}", status_code=303)
            return back(request, "/tasks", f"No task {wanted} (unknown, or expired after completing).", "bad")
        tasks = []
        for task_id in _seen_task_ids(site, request):
            task = Task.find(task_id, client=site.client)
            if task is not None:
                try:
                    tasks.append(task.status())
                except LookupError:  # expired between the two reads
                    continue
        tasks.sort(key=lambda t: t.get("created_at") or 0, reverse=True)
        return site.page(request, "tasks.html", page="tasks", title="Tasks", tasks=tasks)

    def detail(request: Request) -> Response:
        task_id = request.path_params["task_id"]
        task = Task.find(task_id, client=site.client)
        if task is None:
            return site.not_found(request, "tasks", "Task", f"No task {task_id}: unknown, or expired after "
                                  "completing (a task's records are kept for its retention time).", "/tasks")
        try:
            status = task.status()
        except LookupError:
            return site.not_found(request, "tasks", "Task", f"Task {task_id} just expired.", "/tasks")
        chosen = request.query_params.get("status") or None
        if chosen not in (None, *keys.TASK_STATUSES):
            chosen = None
        total = status["counts"][chosen] if chosen else status["total"]
        paging = pager(request, total, EVENTS_PER_PAGE)
        events = task.events(status=chosen, offset=paging.offset, limit=EVENTS_PER_PAGE) if total else []
        response = site.page(request, "task.html", page="tasks", title=status["name"] or f"Task {task_id}",
                             task=status, events=events, chosen=chosen, statuses=keys.TASK_STATUSES, pager=paging)
        if TASK_ID.fullmatch(task_id):
            recent = [task_id, *(t for t in _recent(request) if t != task_id)][:RECENT_LIMIT]
            response.set_cookie(RECENT_COOKIE, ".".join(recent), max_age=30 * 86400,
                                path=request.scope.get("root_path", "") or "/", httponly=True, samesite="strict")
        return response

    return [
        Route("/tasks", index, name="tasks"),
        Route("/tasks/{task_id}", Negotiated(detail, json_api)),
        Route("/tasks/{task_id}/events", json_api),
        Mount("/api", json_api),  # /api/tasks/<id> and /api/tasks/<id>/events: JSON whatever the Accept
    ]
