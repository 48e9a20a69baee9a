"""The Search page: one search over queues, lanes, scheduled, retry and dead (`api.Search`), a
page at a time (each page reads a bounded number of entries and links the next by its cursor),
each match linked to its job page, and the per-set pages' bulk actions on every match.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from sidequest.api import Search
from sidequest.api.search import PLACES
from sidequest.web.render import back
from sidequest.web.site import PER_PAGE, Site, field, form

FIELDS = ("name", "args", "error", "jid", "queue")  # the form's fields: `Search`'s keywords
LABELS = {"queue": "Queues", "lane": "Lanes", "scheduled": "Scheduled", "retry": "Retries", "dead": "Dead"}
BULK = {"retry_all": ("retry_all", "Retried or queued to run"), "delete_all": ("delete_all", "Deleted"),
        "kill_all": ("kill_all", "Killed")}


def _criteria(value: Callable[[str], str]) -> dict[str, str]:
    """The search's fields from a query string or a form, trimmed; empty ones left out."""
    return {name: value(name).strip()[:200] for name in FIELDS if value(name).strip()}


def _where(values: list[str]) -> tuple[str, ...]:
    return tuple(place for place in PLACES if place in values) or PLACES


def _query(criteria: dict[str, str], where: tuple[str, ...]) -> str:
    kept = list(criteria.items()) + ([("in", place) for place in where] if where != PLACES else [])
    return urlencode(kept)


def routes(site: Site) -> list[Route]:
    def listing(request: Request) -> Response:
        params = request.query_params
        criteria = _criteria(lambda n: params.get(n, ""))
        where = _where(params.getlist("in"))
        cursor = params.get("cursor") or None
        page, problem = None, None
        if criteria:
            try:
                page = Search(**criteria, where=where, client=site.client).page(cursor, PER_PAGE)
            except ValueError as exc:
                problem = str(exc)
        return site.page(request, "search.html", page="search", title="Search", criteria=criteria,
                         where=where, places=LABELS, found=page, problem=problem, cursor=cursor,
                         query=_query(criteria, where), refresh=False)

    def act(request: Request) -> Response:
        criteria = _criteria(lambda n: field(request, n))
        where = _where(form(request).get("in", []))
        action = field(request, "do")
        if action not in BULK:
            return PlainTextResponse(f"unknown action {action!r}", status_code=400)
        path = "/search?" + _query(criteria, where)
        if not criteria:
            return back(request, path, "Say what to find first: bulk actions act on the matches of a search.", "info")
        method, past = BULK[action]
        moved = getattr(Search(**criteria, where=where, client=site.client), method)()
        return back(request, path, f"{past} {moved:,} matching job{'' if moved == 1 else 's'}.")

    return [Route("/search", listing, name="search"), Route("/search/actions", act, methods=["POST"])]
