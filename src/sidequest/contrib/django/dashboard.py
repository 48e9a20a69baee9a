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
page (`settings.LOGIN_URL`), a signed-in user who is not active staff gets 403. The route is
exempt from Django's CSRF check because the dashboard checks its own token on every POST
(see `sidequest.web.security`); its cookie lives under the mount point.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, re_path
from django.views.decorators.csrf import csrf_exempt
from starlette.types import ASGIApp, Message

from ...client import Client

View = Callable[..., Coroutine[Any, Any, HttpResponse]]


def dashboard_urls(*, read_only: bool = False, client: Client | None = None) -> list[URLPattern]:
    """URL patterns serving the dashboard where they are included, to active staff users only.

    `read_only=True` shows everything and changes nothing; `client` picks the Redis (default:
    the one `SIDEQUEST` configures)."""
    return [re_path(r"^(?P<subpath>.*)$", dashboard_view(read_only=read_only, client=client),
                    name="sidequest-dashboard")]


def dashboard_view(*, read_only: bool = False, client: Client | None = None) -> View:
    """The view behind `dashboard_urls`; it takes the path under the mount point as `subpath`."""
    app: ASGIApp | None = None

    async def dashboard(request: HttpRequest, subpath: str) -> HttpResponse:
        nonlocal app
        user = await request.auser()
        if not user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not (user.is_active and getattr(user, "is_staff", False)):
            raise PermissionDenied("the sidequest dashboard is for staff users")
        if app is None:
            from ...web import create_app

            app = create_app(client, read_only=read_only)
        root = request.path[:len(request.path) - len(subpath)].rstrip("/")
        return await call_asgi(app, asgi_scope(request, root), request.body)

    return csrf_exempt(dashboard)


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
