"""The Retries, Scheduled and Dead pages: paged lists, a filter, one job's detail, and actions on
one entry, the ticked ones, or every entry matching the filter. As Sidekiq's, Retries and
Scheduled list the soonest first, Dead the newest first (each set's `soonest_first`, the CLI's order too).

A page reads one page of ranks (ZRANGE or ZREVRANGE) and the set's size, whatever the set holds. A filter
walks the set with the API's ZSCAN (the server matches), stopping after `FILTER_CAP` matches
(a link opens the same filter on the Search page, which pages past any cap), so a filtered page
is not refreshed live; "all matching" actions walk the whole set, in the API.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from sidequest.api import DeadSet, JobSet, RetrySet, ScheduledSet, SortedEntry
from sidequest.client.sync_client import Client
from sidequest.errors import PayloadError
from sidequest.web.render import back
from sidequest.web.site import PER_PAGE, Site, field, form, job_path, pager
from sidequest.worker.retry import retry_limit

FILTER_CAP = 1000
MAX_KEYS = 1000  # entries one "selected" action may name


@dataclass(frozen=True)
class Kind:
    path: str  # under the mount point: "/retries"
    title: str
    when_label: str  # what the score means here
    open: Callable[[Client], JobSet]
    one: dict[str, str]  # action on one or the ticked -> SortedEntry method
    every: dict[str, str]  # action on all (matching) -> JobSet method
    past: dict[str, str]  # action -> what the message says was done
    search_in: str  # this set on the Search page (`api.search.PLACES`), which pages past FILTER_CAP


PAST = {"retry": "Retried", "run": "Queued", "delete": "Deleted", "kill": "Killed"}
KINDS = {
    "retries": Kind("/retries", "Retries", "Next retry", RetrySet,
                    {"retry": "retry", "delete": "delete", "kill": "kill"},
                    {"retry_all": "retry_all", "delete_all": "delete_all", "kill_all": "kill_all"}, PAST, "retry"),
    "scheduled": Kind("/scheduled", "Scheduled", "Runs", ScheduledSet,
                      {"run": "add_to_queue", "delete": "delete", "kill": "kill"},
                      {"run_all": "add_all_to_queue", "delete_all": "delete_all", "kill_all": "kill_all"}, PAST,
                      "scheduled"),
    "dead": Kind("/dead", "Dead", "Died", DeadSet,
                 {"retry": "retry", "delete": "delete"},
                 {"retry_all": "retry_all", "delete_all": "delete_all"}, PAST, "dead"),
}


def _filter(values: Callable[[str], str]) -> tuple[str, str, dict[str, str | None]]:
    """(q, by, select() keywords) from a query string or a form."""
    q = values("q").strip()[:200]
    by = "name" if values("by") == "name" else "text"
    if not q:
        return "", by, {"name": None, "text": None}
    return q, by, {"name": q if by == "name" else None, "text": q if by == "text" else None}


def routes(site: Site) -> list[Route]:
    def listing(kind_name: str) -> Callable[[Request], Response]:
        kind = KINDS[kind_name]

        def handler(request: Request) -> Response:
            jobs = kind.open(site.client)
            q, by, chosen = _filter(lambda n: request.query_params.get(n, ""))
            capped = False
            if q:
                matches: list[SortedEntry] = []
                for entry in jobs.select(**chosen):
                    matches.append(entry)
                    if len(matches) >= FILTER_CAP:
                        capped = True
                        break
                matches.sort(key=lambda e: e.raw_score, reverse=not jobs.soonest_first)
                paging = pager(request, len(matches))
                entries = matches[paging.offset:paging.offset + PER_PAGE]
            else:
                paging = pager(request, jobs.size)
                entries = jobs.page(paging.offset, PER_PAGE, soonest_first=jobs.soonest_first) if paging.total else []
            return site.page(request, "set.html", page=kind_name, title=kind.title, kind=kind_name,
                             base=kind.path, when_label=kind.when_label, entries=entries, pager=paging,
                             size=jobs.size if q else paging.total, q=q, by=by, capped=capped,
                             shown_matches=len(matches) if q else 0, refresh=not q, search_in=kind.search_in)
        return handler

    def detail(kind_name: str) -> Callable[[Request], Response]:
        kind = KINDS[kind_name]

        def handler(request: Request) -> Response:
            try:
                entry = kind.open(site.client).get(request.path_params["key"])
            except ValueError:
                entry = None
            if entry is None:
                return site.not_found(request, kind_name, kind.title,
                                      f"This job is no longer in {kind.title}: it may have run, been retried, "
                                      "deleted or killed meanwhile.", kind.path)
            return site.page(request, "entry.html", page=kind_name, title=entry.klass or kind.title,
                             kind=kind_name, base=kind.path, set_title=kind.title, when_label=kind.when_label,
                             e=entry, max_retries=retry_limit(entry.item, site.client.config.max_retries),
                             refresh=False)
        return handler

    def act(kind_name: str) -> Callable[[Request], Response]:
        kind = KINDS[kind_name]

        def handler(request: Request) -> Response:
            jobs = kind.open(site.client)
            action = field(request, "do")
            q, by, chosen = _filter(lambda n: field(request, n))
            listing_path = kind.path + (("?" + urlencode({"q": q, "by": by})) if q else "")
            if field(request, "job"):  # posted from the job page: back there
                listing_path = job_path(field(request, "job"))
            verb = action.removesuffix("_all")
            if action in kind.every:
                moved = getattr(jobs, kind.every[action])(**chosen)
                scope = f" matching “{q}”" if q else ""
                return back(request, listing_path, f"{kind.past[verb]} {_jobs(moved)}{scope}.")
            if action not in kind.one:
                return PlainTextResponse(f"unknown action {action!r}", status_code=400)
            chosen_keys = form(request).get("key", [])
            if len(chosen_keys) > MAX_KEYS:
                return PlainTextResponse(f"at most {MAX_KEYS} entries at once", status_code=413)
            if not chosen_keys:
                return back(request, listing_path, "Nothing was selected.", "info")
            done = gone = refused = 0
            for key in dict.fromkeys(chosen_keys):
                try:
                    entry = jobs.get(key)
                except ValueError:
                    entry = None
                if entry is None:
                    gone += 1
                    continue
                try:
                    moved = getattr(entry, kind.one[action])()
                except PayloadError:
                    refused += 1
                    continue
                done += moved
                gone += not moved
            text = f"{kind.past[verb]} {_jobs(done)}."
            if gone:
                text += f" {_jobs(gone)} had already left {kind.title} (moved by someone else)."
            if refused:
                text += f" {_jobs(refused)} cannot be queued: not a valid job (delete it instead)."
            return back(request, listing_path, text, "ok" if done else "info")
        return handler

    found: list[Route] = []
    for name, kind in KINDS.items():
        found += [
            Route(kind.path, listing(name), name=name),
            Route(kind.path + "/actions", act(name), methods=["POST"]),
            Route(kind.path + "/{key}", detail(name)),
        ]
    return found


def _jobs(count: int) -> str:
    return f"{count:,} job" + ("" if count == 1 else "s")
