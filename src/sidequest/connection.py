"""Redis connections from a URL (redis://, rediss:// with TLS, unix://), with clear errors.

    r = connect("rediss://:secret@cache.example.com:6380/0")   # raises RedisUnavailableError

The error names the URL with the password masked, and says whether the server could not be
reached or refused the credentials.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import redis

from .errors import RedisUnavailableError

# A blocking fetch waits at most a few seconds; the socket timeout must be longer than any
# blocking call we make, or redis-py would cut a healthy BRPOP short.
SOCKET_TIMEOUT = 30.0
CONNECT_TIMEOUT = 5.0


def mask_url(url: str) -> str:
    """`redis://user:secret@host:6379/0` -> `redis://user:****@host:6379/0`."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, f"{user}:****@{host}", parts.path, parts.query, parts.fragment))


def connect(url: str, *, check: bool = True, max_connections: int | None = None) -> redis.Redis:
    """A client for `url`; with `check`, PING first and raise RedisUnavailableError on failure."""
    try:
        client = redis.Redis.from_url(
            url,
            socket_timeout=SOCKET_TIMEOUT,
            socket_connect_timeout=CONNECT_TIMEOUT,
            socket_keepalive=True,
            health_check_interval=30,
            max_connections=max_connections,
        )
    except ValueError as exc:
        raise RedisUnavailableError(f"invalid Redis URL {mask_url(url)}: {exc}") from None
    if check:
        ping(client, url)
    return client


def ping(client: redis.Redis, url: str) -> None:
    try:
        client.ping()
    except redis.AuthenticationError as exc:
        raise RedisUnavailableError(f"Redis at {mask_url(url)} refused authentication: {exc}") from None
    except redis.ResponseError as exc:
        if "NOAUTH" in str(exc) or "WRONGPASS" in str(exc) or "NOPERM" in str(exc):
            raise RedisUnavailableError(f"Redis at {mask_url(url)} refused authentication: {exc}") from None
        raise RedisUnavailableError(f"Redis at {mask_url(url)} answered with an error: {exc}") from None
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        raise RedisUnavailableError(f"cannot reach Redis at {mask_url(url)}: {exc}") from None


def answers(url: str) -> bool:
    """True if a Redis server answers PING at `url` (used to decide on the embedded server)."""
    try:
        client = redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError):
        return False
