"""The Tasks pages: the tasks created last, newest first and paged, with their progress (from
the recent tasks index that `Task.create` keeps); a task's progress, its counts per status and
its jobs' events with messages, filtered by status and paged; and a task opened by its id.

`/tasks/<id>` and `/tasks/<id>/events` keep answering JSON (`sidequest.features.tasks.http`) to any client
that does not ask for HTML, so front ends polling the tasks API see no change; the same API is
also at `/api/tasks/<id>`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from sidequest.features.tasks import RECENT_AGE, RECENT_LIMIT, Task
from sidequest.features.tasks.http import tasks_app
from sidequest.store import keys
from sidequest.web.render import FRAGMENT_HEADER, back
from sidequest.web.site import Site, pager, whole

EVENTS_PER_PAGE = 25
TASKS_PER_PAGE = 25


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


def routes(site: Site) -> list[Route | Mount]:
    json_api = tasks_app(site.client)

    def index(request: Request) -> Response:
        wanted = request.query_params.get("id", "").strip()
        if wanted:
            if Task.find(wanted, client=site.client) is not None:
                root = request.scope.get("root_path", "")
                return RedirectResponse(f"{root}/tasks/{quote(wanted, safe='')}", status_code=303)
            return back(request, "/tasks", f"No task {wanted} (unknown, or expired after completing).", "bad")
        offset = (whole(request.query_params.get("page"), 1) - 1) * TASKS_PER_PAGE
        total, tasks = Task.recent(offset, TASKS_PER_PAGE, client=site.client)
        paging = pager(request, total, TASKS_PER_PAGE)
        if paging.offset != offset:  # past the last page: show the last one
            total, tasks = Task.recent(paging.offset, TASKS_PER_PAGE, client=site.client)
        return site.page(request, "tasks.html", page="tasks", title="Tasks", tasks=tasks, pager=paging,
                         limit=RECENT_LIMIT, max_age_days=round(RECENT_AGE / 86400))

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
        return site.page(request, "task.html", page="tasks", title=status["name"] or f"Task {task_id}",
                         task=status, events=events, chosen=chosen, statuses=keys.TASK_STATUSES, pager=paging)

    return [
        Route("/tasks", index, name="tasks"),
        Route("/tasks/{task_id}", Negotiated(detail, json_api)),
        Route("/tasks/{task_id}/events", json_api),
        Mount("/api", json_api),  # /api/tasks/<id> and /api/tasks/<id>/events: JSON whatever the Accept
    ]
