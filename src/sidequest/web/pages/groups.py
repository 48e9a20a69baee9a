"""A queue's groups, acted on from its page (`/queues/<name>`, the Groups table): pause, resume
and reset one; set an operator's override of its weight, concurrency or rate, and clear one.

Every change goes through the admin API (`api.groups`), the one implementation the CLI's
`sidequest groups Q --set G ... / --clear G` uses too, so the rules (bounds, precedence over the
jobs' options, staging at once) are written once. A value the API refuses comes back to the page
as its one-line message; the form's empty fields keep what the group has.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from sidequest.api import clear_group_limits, pause_group, reset_group, resume_group, set_group_limits
from sidequest.api.groups import GroupInfo, parse_rate
from sidequest.store.lanes.limits import NAMES
from sidequest.web.render import back
from sidequest.web.site import Site, field


def routes(site: Site) -> list[Route]:
    def act(request: Request) -> Response:
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
        if action in ("set", "clear"):
            try:
                info = set_limits(request, site, name, group) if action == "set" else clear_limits(
                    request, site, name, group)
            except ValueError as error:
                return back(request, here, f"Group {group}: {error}", "bad")
            return back(request, here, f"Group {group}: {described(info)}.")
        return PlainTextResponse(f"unknown action {action!r}", status_code=400)

    return [Route("/queues/group-actions", act, methods=["POST"])]


def set_limits(request: Request, site: Site, queue: str, group: str) -> GroupInfo:
    """The form's filled fields as overrides (`api.set_group_limits`); ValueError with one line."""
    weight, concurrency = whole(request, "weight"), whole(request, "concurrency")
    rate_text = field(request, "rate").strip()
    rate = parse_rate(rate_text) if rate_text else None
    return set_group_limits(queue, group, weight=weight, concurrency=concurrency, rate=rate, client=site.client)


def clear_limits(request: Request, site: Site, queue: str, group: str) -> GroupInfo:
    """Remove one override (`limit`: weight, concurrency or rate), or all of them."""
    limit = field(request, "limit")
    return clear_group_limits(queue, group, *([limit] if limit else []), client=site.client)


def whole(request: Request, name: str) -> int | None:
    """A form's whole-number field; None when empty (keep what the group has)."""
    text = field(request, name).strip()
    if not text:
        return None
    if not re.fullmatch(r"-?\d{1,12}", text):
        raise ValueError(f"{name} must be a whole number, got {text[:40]!r}")
    return int(text)


def described(info: GroupInfo) -> str:
    """The group's limits now, and which an operator set, in one line."""
    rate = f"{info.rate[0]:,} per {info.rate[1]:g} s" if info.rate else "none"
    over = ", ".join(n for n in NAMES if n in info.overridden) or "nothing"
    return f"weight {info.weight}, concurrency {info.concurrency or 'none'}, rate {rate}; set by an operator: {over}"
