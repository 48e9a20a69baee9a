"""The dashboard inside Django's URLconf, for staff only:

    # urls.py
    from django.urls import include, path
    from sidequest.contrib.django import dashboard_urls

    urlpatterns = [path("sidequest/", include(dashboard_urls()))]

Django's URLconf routes to views, not to ASGI apps, so the route is an async view that calls
the dashboard's Starlette app in the same process: it builds the ASGI request from Django's
(the part of the path past the mount point becomes the app's own path, the mount point its
`root_path`), runs the app, and returns what the app answered. That works under WSGI
(`runserver`, gunicorn) and ASGI alike, with no second server and no proxy. Every page,
action, and the pages' polling are plain request and response; nothing of the dashboard streams.

Before the app runs, the view checks the Django user: an anonymous visitor goes to the login
page (`settings.LOGIN_URL`), a signed-in user who is not active staff gets 403. Active staff see
every page; only those with the dashboard's own permission, `sidequest.manage_jobs` (see
`models`; superusers have it), may act: for the others the pages are read-only (no buttons,
every POST 403), told to the app per request in the ASGI scope. The route is
exempt from Django's CSRF check because the dashboard checks its own token on every POST
(see `sidequest.web.security`); its cookie lives under the mount point.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, re_path
from django.views.decorators.csrf import csrf_exempt
from starlette.requests import Request
from starlette.types import ASGIApp, Message

from sidequest.client.sync_client import Client, default_client
from sidequest.contrib.django.models import MANAGE_PERMISSION

View = Callable[..., Coroutine[Any, Any, HttpResponse]]
ACCESS = "sidequest.access"  # the scope's key for the view's verdict on the user (see `_access`)


def dashboard_urls(*, read_only: bool = False, client: Client | None = None) -> list[URLPattern]:
    """URL patterns serving the dashboard where they are included, to active staff users only;
    acting needs `sidequest.manage_jobs` (superusers have it), the others see it read-only.

    `read_only=True` shows everything and changes nothing; `client` picks the Redis (default:
    the one `SIDEQUEST` configures)."""
    return [re_path(r"^(?P<subpath>.*)$", dashboard_view(read_only=read_only, client=client),
                    name="sidequest-dashboard")]


def dashboard_view(*, read_only: bool = False, client: Client | None = None) -> View:
    """The view behind `dashboard_urls`; it takes the path under the mount point as `subpath`."""
    built: dict[Client, ASGIApp] = {}  # per client: without one, the default client (`configure` may replace it)

    async def dashboard(request: HttpRequest, subpath: str) -> HttpResponse:
        user = await request.auser()
        if not user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not (user.is_active and getattr(user, "is_staff", False)):
            raise PermissionDenied("the sidequest dashboard is for staff users")
        chosen = client or default_client()
        app = built.get(chosen)
        if app is None:
            from sidequest.web import create_app

            built.clear()
            app = built[chosen] = create_app(chosen, read_only=read_only, auth=_access)
        root = request.path[:len(request.path) - len(subpath)].rstrip("/")
        scope = asgi_scope(request, root)
        has_perm = getattr(user, "has_perm", None)  # a custom user model may have no permissions at all
        may_act = has_perm is not None and await sync_to_async(has_perm)(MANAGE_PERMISSION)  # reads the tables
        scope[ACCESS] = True if may_act else "read-only"
        return await call_asgi(app, scope, request.body)

    return csrf_exempt(dashboard)


async def _access(request: Request) -> bool | str:
    """The app's auth hook: what the view decided for this user (True: may act; "read-only")."""
    verdict: bool | str = request.scope.get(ACCESS, False)
    return verdict


def asgi_scope(request: HttpRequest, root_path: str) -> dict[str, Any]:
    """The ASGI HTTP scope of a Django request, for an app mounted at `root_path`."""
    host, _, port = request.get_host().partition(":")
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "root_path": root_path,
        "query_string": request.META.get("QUERY_STRING", "").encode("latin-1"),
        "headers": [(name.lower().encode("latin-1"), value.encode("latin-1"))
                    for name, value in request.headers.items()],
        "server": (host, int(port) if port.isdigit() else (443 if request.is_secure() else 80)),
        "client": (request.META.get("REMOTE_ADDR", ""), 0),
    }


async def call_asgi(app: ASGIApp, scope: dict[str, Any], body: bytes) -> HttpResponse:
    """Run one request through `app` and return its answer as a Django response."""
    answered = asyncio.Event()
    started: dict[str, Any] = {}
    chunks: list[bytes] = []
    sent_body = False

    async def receive() -> Message:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await answered.wait()  # the client is "connected" until the app has answered
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            started.update(message)
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                answered.set()

    await app(scope, receive, send)
    answered.set()
    response = HttpResponse(b"".join(chunks), status=started.get("status", 500))
    for raw_name, raw_value in started.get("headers", []):
        name, value = raw_name.decode("latin-1"), raw_value.decode("latin-1")
        if name.lower() == "set-cookie":
            response.cookies.load(value)  # one header each: a dict of headers would keep the last
        elif name.lower() != "content-length":
            response.headers[name] = value
    return response
