"""`sidequest web`: the dashboard, served by uvicorn."""

from __future__ import annotations

import errno
import logging
import socket

import click

from sidequest.cli.admin.connect import reach
from sidequest.cli.logs import configure_logging
from sidequest.cli.root import UserError, main
from sidequest.config import Config
from sidequest.errors import ConfigError, RedisUnavailableError
from sidequest.store.connection import mask_url

log = logging.getLogger("sidequest")


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=7878, show_default=True, type=click.IntRange(1, 65535))
@click.option("--redis-url", metavar="URL",
              help="Redis to show (default: REDIS_URL, else localhost:6379, as `sidequest worker` uses it).")
@click.option("--read-only", is_flag=True, help="Show everything, change nothing (every POST gets 403).")
@click.option("--basic-auth", metavar="USER:PASSWORD", envvar="SIDEQUEST_WEB_BASIC_AUTH", show_envvar=True,
              help="Ask every visitor for these credentials (keep the password out of `ps`: use the variable).")
@click.option("--poll-interval", default=2.0, show_default=True, type=click.FloatRange(min=0.2),
              help="Seconds between the pages' live updates.")
@click.option("--root-path", default="", metavar="PATH",
              help="The path a reverse proxy serves it under (e.g. /sidequest), the prefix stripped.")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              envvar="SIDEQUEST_WEB_ALLOWED_HOSTS", show_envvar=True,
              help="A Host name it answers to (repeatable; *.example.com for subdomains, * for any), "
                   "besides addresses, localhost and --host. Other names get 400 (DNS rebinding).")
def web(host: str, port: int, redis_url: str | None, read_only: bool, basic_auth: str | None,
        poll_interval: float, root_path: str, allowed_hosts: tuple[str, ...]) -> None:
    """Serve the web dashboard, /metrics for Prometheus, and the tasks JSON API.

    \b
    Examples:
      sidequest web                                   # http://127.0.0.1:7878
      SIDEQUEST_WEB_BASIC_AUTH=admin:s3cret sidequest web --host 0.0.0.0 --read-only
      sidequest web --allowed-host jobs.example.com   # the name a proxy or browser uses
    """
    import uvicorn

    from sidequest.client.sync_client import Client
    from sidequest.web import create_app
    from sidequest.web.hosts import default_hosts

    credentials: tuple[str, str] | None = None
    if basic_auth:
        user, sep, password = basic_auth.partition(":")
        if not sep or not user or not password:
            raise UserError("--basic-auth must be USER:PASSWORD, both non-empty")
        credentials = (user, password)
    sockets = listen(host, port)  # before anything is announced, and before Redis
    configure_logging(False, None)
    try:
        config = Config.from_env()
        if redis_url:
            config = config.replace(redis_url=redis_url)
        configure_logging(False, None, url=config.url)  # now that its credentials are known
        client = Client(config)
        # Connect now: a wrong URL is one line at start, not an error page later. Without a URL, the
        # Redis on localhost (the embedded one `sidequest worker` started) if it answers; never a new
        # embedded server, whose empty data a dashboard deployed without REDIS_URL would show as real.
        reach(client, never="`sidequest web` never starts")
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    except RedisUnavailableError as exc:
        raise click.ClickException(str(exc)) from None
    names = [*default_hosts(host), *allowed_hosts]
    app = create_app(client, basic_auth=credentials, read_only=read_only, poll_interval=poll_interval,
                     allowed_hosts=names)
    log.info("dashboard on http://%s:%d%s%s (redis=%s)", host, port, " read-only" if read_only else "",
             " with basic auth" if credentials else "", mask_url(config.url))
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, root_path=root_path.rstrip("/"),
                                           log_level="warning"))
    try:
        server.run(sockets=sockets)
    except KeyboardInterrupt:  # uvicorn stops, then raises the INT it caught: a normal end, as in uvicorn.run
        pass


def listen(host: str, port: int) -> list[socket.socket]:
    """Sockets listening on every address of `host` at `port`, or one line saying why not."""
    try:
        addresses = dict.fromkeys(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE))
    except socket.gaierror as exc:
        raise UserError(f"--host {host}: {exc.strerror}") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in addresses:
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio.create_server does, and:
            if family == socket.AF_INET6:  # one socket per family ("localhost" may give ::1 and 127.0.0.1)
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen()
    except OSError as exc:
        for sock in sockets:
            sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise click.ClickException(f"port {port} on {host} is already in use: choose another with --port") from None
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sockets
