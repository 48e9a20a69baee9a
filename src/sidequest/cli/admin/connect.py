"""What every admin command shares: its flags, its Redis client, and one-line errors.

Admin commands read `REDIS_URL` (or `--redis-url`) and, without either, the Redis on
localhost at the embedded port, where `sidequest worker` starts the embedded server; they
never start one themselves, since an admin command on an empty new server would only show
nothing. If nothing answers, they say so in one line and exit 1. A mistake the user made (a bad
flag value, an unknown job id) is one line and exit 2, never a traceback.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import click
import redis

from sidequest.cli.root import Unreachable, UserError
from sidequest.client.sync_client import Client
from sidequest.config import Config
from sidequest.errors import ConfigError, RedisUnavailableError, RedisURLError
from sidequest.store.connection import mask_url
from sidequest.store.reasons import reason

P = ParamSpec("P")
R = TypeVar("R")


class AdminCommand(click.Command):
    """A command whose usage errors (a bad option value, a stray argument) are one line, exit 2."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise UserError(f"{exc.format_message()} (see `{ctx.command_path} --help`)") from None


def redis_url_option(f: Callable[P, R]) -> Callable[P, R]:
    return click.option("--redis-url", metavar="URL",
                        help="Redis to use (default: REDIS_URL, else localhost:6379, the embedded one).")(f)


def json_option(f: Callable[P, R]) -> Callable[P, R]:
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of tables.")(f)


def admin_client(redis_url: str | None, never: str = "admin commands never start") -> Client:
    """A client on the chosen Redis, connected (PING) now, so a wrong URL fails here in one line.
    `never` names who, in the hint given when no URL was set and nothing answers on localhost."""
    try:
        config = Config.from_env()
        if redis_url:
            config = config.replace(redis_url=redis_url)
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    client = Client(config)
    reach(client, never)
    return client


def reach(client: Client, never: str) -> None:
    """Connect (PING) now, so a wrong URL fails here in one line; with no URL set and nothing on
    localhost, the line says to set one. `never` names who never starts the embedded Redis."""
    try:
        client.redis  # noqa: B018  (connects and pings)
    except RedisURLError as exc:
        raise UserError(str(exc)) from None
    except RedisUnavailableError as exc:
        hint = "" if client.config.redis_url else (f" (set REDIS_URL or --redis-url; {never} the "
                                                    "embedded Redis: `sidequest worker` does)")
        raise Unreachable(f"{exc}{hint}") from None


def redis_errors(f: Callable[P, R]) -> Callable[P, R]:
    """Turns a Redis failure in the middle of a command into one line and exit status 1."""

    @functools.wraps(f)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return f(*args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise Unreachable(f"lost the connection to Redis: {reason(exc)}") from None
        except redis.RedisError as exc:
            raise Unreachable(f"Redis refused a command: {reason(exc)}") from None

    return wrapper


def describe(client: Client) -> str:
    """The client's Redis URL with any password masked, for headers."""
    return mask_url(client.config.url)
