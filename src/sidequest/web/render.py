"""Pages from Jinja2 templates, escaped by default, whole or as a live fragment.

`render(request, "busy.html", page="busy", ...)` answers with the whole page, or, when the
request carries `X-Sidequest-Fragment` (the page's own script refreshing itself), with the
`content` block alone. Everything a template prints is HTML-escaped (autoescape is on for every
template); the `json` filter gives plain text, so a job argument like `<script>` shows as text.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from jinja2 import Environment, PackageLoader
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse

from sidequest import __version__

FLASH_COOKIE = "sidequest_flash"
FRAGMENT_HEADER = "x-sidequest-fragment"

NAV = (  # (page key, label, path, badge: a stat the nav shows live)
    ("dashboard", "Dashboard", "/", None),
    ("busy", "Busy", "/busy", "busy"),
    ("queues", "Queues", "/queues", "enqueued"),
    ("retries", "Retries", "/retries", "retries"),
    ("scheduled", "Scheduled", "/scheduled", "scheduled"),
    ("dead", "Dead", "/dead", "dead"),
    ("search", "Search", "/search", None),
    ("job-metrics", "Metrics", "/job-metrics", None),
    ("tasks", "Tasks", "/tasks", None),
    ("workflows", "Workflows", "/workflows", None),
    ("periodic", "Periodic", "/periodic", None),
)
CLUSTER_NAV = ("cluster", "Cluster", "/cluster", None)  # on a Redis Cluster only


def _num(value: Any) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}"
    return f"{int(value or 0):,}"


def _json(value: Any, indent: int | None = None) -> str:
    """JSON as plain text: autoescape then shows `<` as `&lt;`, never as markup."""
    return json.dumps(value, indent=indent, ensure_ascii=False, default=str)


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 1:
        return "0" if value <= 0 else f"{value * 1000:.0f} ms"
    if value < 60:
        return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"
    minutes, secs = divmod(int(value), 60)
    if minutes < 60:
        return f"{minutes}m {secs}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes}m"
    return f"{hours // 24}d {hours % 24}h"


def _ms(value: float) -> str:
    if value == float("inf"):
        return "> 60 s"
    if value >= 1000:
        return f"{value / 1000:,.1f} s".replace(".0 s", " s")
    return f"{value:,.0f} ms" if value >= 10 else f"{value:,.1f} ms".replace(".0 ms", " ms")


def _iso(epoch: float | None) -> str:
    if not epoch:
        return ""
    return datetime.fromtimestamp(float(epoch), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _clock(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%H:%M:%S")


def _percent(value: float) -> str:
    return f"{value * 100:.1f} %" if value < 0.1 and value > 0 else f"{value * 100:.0f} %"


class Renderer:
    """The template environment and the static files' cache-busting names."""

    def __init__(self, *, poll_interval: float, redis_label: str, cluster: bool = False) -> None:
        self.nav = (*NAV, CLUSTER_NAV) if cluster else NAV
        self.env = Environment(loader=PackageLoader("sidequest.web", "templates"), autoescape=True,
                               trim_blocks=True, lstrip_blocks=True)
        self.env.filters.update(num=_num, json=_json, seconds=_seconds, ms=_ms, iso=_iso, clock=_clock,
                                percent=_percent)
        self.poll_ms = int(poll_interval * 1000)
        self.redis_label = redis_label
        static = resources.files("sidequest.web") / "static"
        # a digest of the files in each URL: a new release is never served from a stale cache
        digest = hashlib.sha256()
        for name in ("sidequest.css", "sidequest.js", "favicon.svg"):
            digest.update((static / name).read_bytes())
        self.asset_version = digest.hexdigest()[:10]

    def page(self, request: Request, template: str, *, page: str, title: str, nav_counts: dict[str, int],
             refresh: bool = True, **context: Any) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        state = request.scope.get("state", {})
        values = {
            "root": root, "page": page, "title": title, "nav": self.nav, "nav_counts": nav_counts,
            "csrf_token": state.get("csrf_token", ""), "read_only": state.get("read_only", False),
            "refresh": refresh, "poll_ms": self.poll_ms, "version": __version__, "now": time.time(),
            "redis_label": self.redis_label, "flash": _flash(request),
            "static": lambda name: f"{root}/static/{name}?v={self.asset_version}",
            "request": request, **context,
        }
        tmpl = self.env.get_template(template)
        headers = {"Cache-Control": "no-store"}
        if request.headers.get(FRAGMENT_HEADER):
            body = "".join(tmpl.blocks["content"](tmpl.new_context(values)))
            return HTMLResponse(body, headers=headers)
        response = HTMLResponse(tmpl.render(values), headers=headers)
        if values["flash"]:
            response.delete_cookie(FLASH_COOKIE, path=root or "/")
        return response


    def unavailable(self, request: Request, error: str, retry_after: int) -> str:
        """The page every route shows while Redis does not answer (see `outage`): it needs no Redis."""
        root = request.scope.get("root_path", "")
        return self.env.get_template("unavailable.html").render(
            root=root, error=error, retry_after=retry_after,
            static=lambda name: f"{root}/static/{name}?v={self.asset_version}")


def _flash(request: Request) -> dict[str, str] | None:
    raw = request.cookies.get(FLASH_COOKIE)
    if not raw or request.headers.get(FRAGMENT_HEADER):
        return None
    try:
        kind, _, text = base64.urlsafe_b64decode(raw.encode()).decode("utf-8").partition(":")
    except (ValueError, UnicodeDecodeError):
        return None
    return {"kind": kind if kind in ("ok", "bad", "info") else "info", "text": text[:300]}


def back(request: Request, path: str, text: str, kind: str = "ok") -> RedirectResponse:
    """After an action: a 303 to `path` (under the mount point) with a one-time message."""
    root = request.scope.get("root_path", "")
    response = RedirectResponse(root + path, status_code=303)
    value = base64.urlsafe_b64encode(f"{kind}:{text}".encode()).decode()
    response.set_cookie(FLASH_COOKIE, value, max_age=60, path=root or "/", httponly=True, samesite="strict")
    return response
