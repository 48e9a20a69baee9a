"""Who may see the dashboard and who may change anything: one ASGI middleware, in front of every route.

In order, for every HTTP request:

1. **Authentication.** With `basic_auth=(user, password)`, a request without those credentials
   gets 401 and a browser prompt. With `auth=hook`, the host application decides: the hook gets
   the Starlette `Request` (a plain function runs in the thread pool, an `async def` on the event
   loop) and returns True (full access), "read-only" (may
   look, may not act), False (403), or a `Response` of its own (a redirect to its login page).
2. **CSRF.** Every browser gets a random token in a cookie (`sidequest_csrf`, HttpOnly,
   SameSite=Strict); pages carry it in each form's hidden `csrf` field and in a `<meta>` tag for
   scripts, which send it as `X-CSRF-Token`. A request with any method but GET, HEAD or OPTIONS
   must present the cookie's token in one of those two places, compared in constant time, or
   it gets 403 — whatever its path, before any route runs. GET never changes anything.
3. **Read-only.** In read-only mode (the app's, or the hook's answer) every such request gets
   403 too, and pages hide their buttons.

A GET (or HEAD) of `/health` skips all three: a probe has no credentials, and the route only
says whether Redis answers.

Every response also carries headers that keep the pages out of other sites' frames (so no one
can trick a click on a button) and let the browser run only the dashboard's own script file
(`HEADERS`): a second wall behind the templates' escaping.

Forms are posted url-encoded; this middleware parses the body once (at most `MAX_BODY` bytes)
and leaves the fields in `request.state.form` for the route.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import inspect
import secrets
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

COOKIE = "sidequest_csrf"
FIELD = "csrf"
HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
MAX_BODY = 1_000_000
PUBLIC = frozenset({"/health"})  # paths a GET reaches without authentication (probes)

HEADERS = [
    (b"content-security-policy", b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                                 b"img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]

AuthResult = bool | str | Response
AuthHook = Callable[[Request], AuthResult | Awaitable[AuthResult]]


class Guard:
    """Authentication, CSRF and read-only mode for the dashboard (see the module docstring)."""

    def __init__(self, app: ASGIApp, *, basic_auth: tuple[str, str] | None = None,
                 auth: AuthHook | None = None, read_only: bool = False) -> None:
        self.app = app
        self.basic_auth = basic_auth
        self.auth = auth
        self.read_only = read_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _with_headers(send, HEADERS)
        request = Request(scope)
        if request.method in SAFE_METHODS and _route_path(scope) in PUBLIC:
            await self.app(scope, receive, send)  # a probe: no login, no cookie, nothing to change
            return
        read_only = self.read_only
        if self.basic_auth is not None and not _credentials_match(request, self.basic_auth):
            await _refuse(401, "Authentication required", scope, receive, send,
                          {"WWW-Authenticate": 'Basic realm="sidequest", charset="UTF-8"'})
            return
        if self.auth is not None:
            verdict = await _ask(self.auth, request)
            if isinstance(verdict, Response):
                await verdict(scope, receive, send)
                return
            if verdict == "read-only":
                read_only = True
            elif verdict is not True:
                await _refuse(403, "Forbidden", scope, receive, send)
                return

        cookie = request.cookies.get(COOKIE, "")
        token = cookie if _well_formed(cookie) else secrets.token_urlsafe(32)
        state = scope.setdefault("state", {})
        state["csrf_token"] = token
        state["read_only"] = read_only

        if request.method not in SAFE_METHODS:
            body = await _read_body(receive)
            if body is None:
                await _refuse(413, "Request body too large", scope, receive, send)
                return
            form = _parse_form(request, body)
            supplied = request.headers.get(HEADER) or (form.get(FIELD) or [""])[0]
            if not (_well_formed(cookie) and hmac.compare_digest(supplied.encode(), cookie.encode())):
                await _refuse(403, "Forbidden: missing or invalid CSRF token (reload the page and try again)",
                              scope, receive, send)
                return
            if read_only:
                await _refuse(403, "Forbidden: the dashboard is read-only", scope, receive, send)
                return
            state["form"] = form
            receive = _replay(body)

        if token != cookie:
            send = _with_headers(send, [(b"set-cookie", _cookie(token, scope))])
        await self.app(scope, receive, send)


async def _ask(hook: AuthHook, request: Request) -> AuthResult:
    """The hook's verdict. A plain function runs in the thread pool, as a sync route does: it may
    wait on the host's database, and the event loop serves every other request meanwhile."""
    if _is_async(hook):
        verdict = hook(request)
    else:
        verdict = await run_in_threadpool(hook, request)
    if inspect.isawaitable(verdict):
        verdict = await verdict
    return verdict


def _is_async(hook: object) -> bool:
    while isinstance(hook, functools.partial):
        hook = hook.func
    return inspect.iscoroutinefunction(hook) or inspect.iscoroutinefunction(type(hook).__call__)


def _route_path(scope: Scope) -> str:
    """The request's path under the mount point (Starlette keeps the whole path in `path`)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root):len(root) + 1] in ("/", ""):
        return path[len(root):]
    return path


def _well_formed(token: str) -> bool:
    return 32 <= len(token) <= 64 and token.isascii()


def _credentials_match(request: Request, expected: tuple[str, str]) -> bool:
    scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        user, _, password = base64.b64decode(encoded, validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    # compare both, always, so the time taken says nothing about which one was wrong
    user_ok = hmac.compare_digest(user.encode(), expected[0].encode())
    password_ok = hmac.compare_digest(password.encode(), expected[1].encode())
    return user_ok and password_ok


async def _read_body(receive: Receive) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _parse_form(request: Request, body: bytes) -> dict[str, list[str]]:
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return {}
    return parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def _cookie(token: str, scope: Scope) -> bytes:
    path = scope.get("root_path") or "/"
    secure = "; Secure" if scope.get("scheme") == "https" else ""
    return f"{COOKIE}={token}; Path={path}; HttpOnly; SameSite=Strict{secure}".encode("latin-1")


def _with_headers(send: Send, headers: list[tuple[bytes, bytes]]) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *headers]}
        await send(message)

    return sending


async def _refuse(status: int, text: str, scope: Scope, receive: Receive, send: Send,
                  headers: dict[str, Any] | None = None) -> None:
    await PlainTextResponse(text, status_code=status, headers=headers)(scope, receive, send)
