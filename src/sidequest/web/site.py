"""What every page handler shares: the client, the renderer, paging, forms, the nav's numbers."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse

from sidequest.api import Stats
from sidequest.client.sync_client import Client
from sidequest.web.render import Renderer

PER_PAGE = 25


@dataclass
class Site:
    client: Client
    renderer: Renderer

    def page(self, request: Request, template: str, *, page: str, title: str, stats: Stats | None = None,
             status_code: int = 200, **context: Any) -> HTMLResponse:
        """A whole page (or its live fragment), with the nav's counts from `stats` or a fresh read."""
        stats = stats if stats is not None else Stats(self.client)
        response = self.renderer.page(request, template, page=page, title=title, nav_counts=nav_counts(stats),
                                      stats=stats, **context)
        response.status_code = status_code
        return response

    def not_found(self, request: Request, page: str, title: str, text: str, back: str) -> HTMLResponse:
        return self.page(request, "missing.html", page=page, title=title, text=text, back=back,
                         refresh=False, status_code=404)


def nav_counts(stats: Stats) -> dict[str, int]:
    """The live numbers, under the names `data-stat` attributes and `/api/stats` use."""
    return {
        "processed": stats.processed, "failed": stats.failed, "busy": stats.workers_size,
        "enqueued": stats.enqueued, "retries": stats.retry_size, "scheduled": stats.scheduled_size,
        "dead": stats.dead_size, "processes": stats.processes_size,
    }


def job_path(jid: str) -> str:
    """The job page's path (under the mount point) of `jid`: every page that lists a job links there."""
    return "/jobs/" + quote(jid, safe="")


def form(request: Request) -> dict[str, list[str]]:
    """The POSTed fields, as the security middleware parsed them."""
    found: dict[str, list[str]] = request.scope.get("state", {}).get("form", {})
    return found


def field(request: Request, name: str, default: str = "") -> str:
    values = form(request).get(name)
    return values[0] if values else default


def whole(raw: str | None, default: int, lowest: int = 1, highest: int = 10**9) -> int:
    """A page number or a count from a query string, clamped; junk gives the default."""
    try:
        return min(max(int(raw or default), lowest), highest)
    except ValueError:
        return default


@dataclass
class Pager:
    """Page `page` of `total` entries, `per` a page; `link(n)` keeps the other query parameters."""

    page: int
    total: int
    per: int = PER_PAGE
    params: tuple[tuple[str, str], ...] = ()

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.per))

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.per

    @property
    def first(self) -> int:
        return min(self.offset + 1, self.total)

    @property
    def last(self) -> int:
        return min(self.offset + self.per, self.total)

    def link(self, page: int) -> str:
        kept = [(k, v) for k, v in self.params if k != "page" and v]
        page = min(max(page, 1), self.pages)
        return "?" + urlencode([*kept, ("page", str(page))])


def pager(request: Request, total: int, per: int = PER_PAGE) -> Pager:
    params = tuple(request.query_params.multi_items())
    wanted = whole(request.query_params.get("page"), 1)
    return Pager(min(wanted, max(1, math.ceil(total / per))), total, per, params)
