"""The Workflows pages: the workflows created last, newest first and paged; a workflow's graph,
drawn on the server as SVG (columns by depth, an arrow from each dependency), each step colored by
its status, with the table of its steps below; a workflow opened by its id.

Everything shown comes from the admin API (`api.workflows`) and is escaped by the templates
(Jinja's autoescape, in SVG text and attributes alike): step names, job names and results are
user data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from sidequest.api.workflows import cancel_workflow, recent_workflows, workflow_detail
from sidequest.features.workflows import Workflow
from sidequest.web.render import back
from sidequest.web.site import Site, pager, whole

PER_PAGE = 25
NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 190, 54, 70, 18, 16  # the graph's geometry, in pixels
TONE = {"waiting": "", "enqueued": "info", "running": "accent", "done": "ok", "failed": "bad",
        "cancelled": "warn", "skipped": ""}  # a step status's tag class (the dashboard's colors)
STATE_TONE = {"running": "info", "succeeded": "ok", "failed": "bad", "cancelled": "warn"}  # a workflow's state's


@dataclass(frozen=True)
class Node:
    name: str
    job: str
    status: str
    tone: str
    x: int
    y: int


def layout(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Columns by depth (a step sits one column right of its deepest dependency), rows in the
    order steps were added; edges as cubic curves from a node's right side to a dependent's left."""
    depth: dict[str, int] = {}
    for step in steps:  # added after their dependencies: one pass suffices
        depth[step["name"]] = 1 + max((depth[d] for d in step["after"] if d in depth), default=-1)
    rows: dict[int, int] = {}
    nodes: dict[str, Node] = {}
    for step in steps:
        column = depth[step["name"]]
        row = rows.get(column, 0)
        rows[column] = row + 1
        nodes[step["name"]] = Node(step["name"], step["job"], step["status"], TONE.get(step["status"], ""),
                                   PAD + column * (NODE_W + GAP_X), PAD + row * (NODE_H + GAP_Y))
    edges = []
    for step in steps:
        target = nodes[step["name"]]
        for dep in step["after"]:
            source = nodes.get(dep)
            if source is None:
                continue
            x1, y1 = source.x + NODE_W, source.y + NODE_H // 2
            x2, y2 = target.x, target.y + NODE_H // 2
            middle = (x1 + x2) // 2
            edges.append(f"M{x1},{y1} C{middle},{y1} {middle},{y2} {x2 - 6},{y2}")
    columns = max(depth.values(), default=0) + 1
    tallest = max(rows.values(), default=1)
    return {"nodes": list(nodes.values()), "edges": edges, "node_w": NODE_W, "node_h": NODE_H,
            "width": 2 * PAD + columns * NODE_W + (columns - 1) * GAP_X,
            "height": 2 * PAD + tallest * NODE_H + (tallest - 1) * GAP_Y}


def routes(site: Site) -> list[Route]:
    def index(request: Request) -> Response:
        wanted = request.query_params.get("id", "").strip()
        if wanted:
            if Workflow.find(wanted, site.client) is not None:
                root = request.scope.get("root_path", "")
                return RedirectResponse(f"{root}/workflows/{quote(wanted, safe='')}", status_code=303)
            return back(request, "/workflows", f"No workflow {wanted} (unknown, or expired).", "bad")
        offset = (whole(request.query_params.get("page"), 1) - 1) * PER_PAGE
        total, flows = recent_workflows(offset, PER_PAGE, client=site.client)
        paging = pager(request, total, PER_PAGE)
        if paging.offset != offset:  # past the last page: show the last one
            total, flows = recent_workflows(paging.offset, PER_PAGE, client=site.client)
        return site.page(request, "workflows.html", page="workflows", title="Workflows", flows=flows,
                         pager=paging, tone=TONE, state_tone=STATE_TONE)

    def detail(request: Request) -> Response:
        workflow_id = request.path_params["workflow_id"]
        found = workflow_detail(workflow_id, site.client)
        if found is None:
            return site.not_found(request, "workflows", "Workflow", f"No workflow {workflow_id}: unknown, or "
                                  "expired (a workflow's records are kept for its ttl).", "/workflows")
        return site.page(request, "workflow.html", page="workflows", title=found["name"] or f"Workflow {workflow_id}",
                         flow=found, graph=layout(found["steps"]), tone=TONE, state_tone=STATE_TONE)

    def cancel(request: Request) -> Response:
        workflow_id = request.path_params["workflow_id"]
        path = f"/workflows/{quote(workflow_id, safe='')}"
        done = cancel_workflow(workflow_id, site.client)
        if done is None:
            return back(request, "/workflows", f"No workflow {workflow_id} (unknown, or expired).", "bad")
        return back(request, path, "Cancelled: no further step starts." if done else "It had already ended.",
                    "ok" if done else "bad")

    return [
        Route("/workflows", index, name="workflows"),
        Route("/workflows/{workflow_id}", detail),
        Route("/workflows/{workflow_id}/cancel", cancel, methods=["POST"]),
    ]
