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

from sidequest.api import DeadSet, JobRecord, JobSet, Queue, RetrySet, ScheduledSet, Search
from sidequest.api.search import PLACES
from sidequest.client.sync_client import Client
from sidequest.errors import PayloadError
from sidequest.web.render import back
from sidequest.web.site import PER_PAGE, Site, field, form

FIELDS = ("name", "args", "error", "jid", "queue", "text")  # the form's fields: `Search`'s keywords
LABELS = {"queue": "Queues", "lane": "Lanes", "scheduled": "Scheduled", "retry": "Retries", "dead": "Dead"}
SETS: dict[str, Callable[[Client], JobSet]] = {"scheduled": ScheduledSet, "retry": RetrySet, "dead": DeadSet}
ONE = {"retry": "Retried or queued to run", "delete": "Deleted", "kill": "Killed"}  # on the ticked matches
MAX_KEYS = 1000  # matches one "selected" action may name
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
        path = "/search?" + _query(criteria, where)
        if action in ONE:
            return _on_ticked(request, site.client, action, path)
        if action not in BULK:
            return PlainTextResponse(f"unknown action {action!r}", status_code=400)
        if not criteria:
            return back(request, path, "Say what to find first: bulk actions act on the matches of a search.", "info")
        method, past = BULK[action]
        moved = getattr(Search(**criteria, where=where, client=site.client), method)()
        return back(request, path, f"{past} {moved:,} matching job{'' if moved == 1 else 's'}.")

    return [Route("/search", listing, name="search"), Route("/search/actions", act, methods=["POST"])]


def _on_ticked(request: Request, client: Client, action: str, path: str) -> Response:
    """Retry, delete or kill the ticked matches, each named `<where>|<key>` (a sorted set's
    entry key) or `queue|<jid>|<queue>`; an entry moved meanwhile is counted as gone."""
    ticked = list(dict.fromkeys(form(request).get("key", [])))
    if len(ticked) > MAX_KEYS:
        return PlainTextResponse(f"at most {MAX_KEYS} entries at once", status_code=413)
    if not ticked:
        return back(request, path, "Nothing was selected.", "info")
    done = gone = 0
    for name in ticked:
        moved = _one(client, action, *name.split("|", 2))
        done += moved is True
        gone += moved is False
    text = f"{ONE[action]} {done:,} job{'' if done == 1 else 's'}."
    if gone:
        text += f" {gone:,} had moved meanwhile, or cannot be acted on there."
    return back(request, path, text, "ok" if done else "info")


def _one(client: Client, action: str, where: str, key: str = "", queue: str = "") -> bool:
    """One ticked match: True if this moved it."""
    record: JobRecord | None
    if where == "queue":
        record = Queue(queue, client).find_job(key) if action == "delete" else None
        return record is not None and record.delete()
    if where not in SETS:
        return False
    try:
        entry = SETS[where](client).get(key)
    except ValueError:
        return False
    if entry is None or (action == "kill" and where == "dead"):
        return False
    verb = {"retry": "add_to_queue" if where == "scheduled" else "retry", "delete": "delete", "kill": "kill"}[action]
    try:
        return bool(getattr(entry, verb)())
    except PayloadError:
        return False
