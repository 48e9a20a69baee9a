"""Which `Host` a dashboard answers to: the defence against DNS rebinding.

A page on `evil.example` whose name is re-pointed at 127.0.0.1 reaches a dashboard bound there
as a same-origin page: it reads the CSRF token from a page and posts with it. Its requests
carry `Host: evil.example`, so a dashboard that answers only to the names it is reached by
refuses them (400), before authentication, cookies or any route.

Allowed, whatever the list: an IP address (a page at an address has no name to re-point, and
probes and Prometheus reach a pod by its address) and the loopback name `localhost`. Then each
entry of the list: a name (`jobs.example.com`), a name with every subdomain (`*.example.com`),
or `*` for any. The port is not compared: a rebound page must use the dashboard's port anyway,
and a proxy that keeps `Host` sends its own.

`sidequest web` always checks, with the name it is bound to (the machine's names for a
wildcard address) and `--allowed-host`'s names; `create_app()` mounted in an application checks
only when given `allowed_hosts=`, since the host application checks its own (Django's
ALLOWED_HOSTS, Starlette's TrustedHostMiddleware, a proxy's server names).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK = ("localhost",)
WILDCARDS = ("", "0.0.0.0", "::", "[::]")  # bind addresses meaning every interface


def default_hosts(bind: str) -> list[str]:
    """The names a dashboard bound to `bind` answers to besides addresses and `localhost`: that
    name, or for a wildcard address the machine's own names."""
    if bind in WILDCARDS:
        return sorted({socket.gethostname(), socket.getfqdn()} - {""})
    return [] if _is_address(bind) else [bind]


def normalized(name: str) -> str:
    return name.strip().lower().rstrip(".")


def host_name(header: str) -> str | None:
    """The name or address of a `Host` header without its port, or None if it is malformed."""
    header = header.strip()
    if header.startswith("["):  # an IPv6 address: [::1]:7878
        end = header.find("]")
        return header[1:end] if end > 1 and header[end + 1:end + 2] in ("", ":") else None
    name, _, port = header.partition(":")
    return normalized(name) if name and (not port or port.isdigit()) else None


def allowed(header: str, names: Iterable[str]) -> bool:
    """Whether a request with this `Host` header is served (see the module docstring)."""
    host = host_name(header)
    if host is None:
        return False
    if _is_address(host) or host in LOOPBACK:
        return True
    for pattern in map(normalized, names):
        if pattern == "*" or host == pattern:
            return True
        if pattern.startswith("*.") and host.endswith(pattern[1:]):
            return True
    return False


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return False
    return True


class HostCheck:
    """ASGI middleware: a request whose `Host` is not allowed gets 400, before anything else runs."""

    def __init__(self, app: ASGIApp, *, names: Iterable[str]) -> None:
        self.app = app
        self.names = [normalized(n) for n in names]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            header = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"host"), "")
            if not allowed(header, self.names):
                response = PlainTextResponse("Invalid Host header: this dashboard does not answer to that name "
                                             "(sidequest web --allowed-host NAME)", status_code=400)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
