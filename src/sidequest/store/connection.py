"""Redis connections from a URL (redis://, rediss:// with TLS, unix://, Sentinel and Cluster),
with clear errors.

    r = connect("rediss://:secret@cache.example.com:6380/0")   # raises RedisUnavailableError
    r = connect("redis+sentinel://:secret@s1:26379,s2:26379,s3:26379/mymaster/0")
    r = connect("redis+cluster://:secret@n1:6379,n2:6379,n3:6379")

The error names the URL with every credential masked (`redaction`), and says whether the server could not be
reached, refused the credentials, or (for rediss://) did not answer TLS.

A Sentinel URL names the Sentinels, the service (the name in `sentinel monitor`) and the
database. Its client asks the Sentinels for the primary whenever it opens a connection, and a
connection whose server stopped being the primary (READONLY after a failover) is closed and
raises a ConnectionError, so every caller (the worker's outage back-off included) reconnects to
the new primary by itself. The direct path (`direct`) opens its connections from the same pool settings,
so it follows too. `user:password@` are the Redis servers' credentials; Sentinels that want
their own take `?sentinel_password=...` (and `sentinel_username=`). `rediss+sentinel://`
speaks TLS to both.

A Cluster URL names some nodes of a Redis (or Valkey) Cluster, any of them: the client asks them
for the slot map as it is built, so it needs one node that answers even without `check`. It
follows MOVED and ASK redirects, and re-sends nothing after a connection error (see `connect`):
that error makes it read the slot map again, so the caller's next call reaches a replica
promoted meanwhile. A Cluster has only database 0. `rediss+cluster://` speaks TLS to every node.
`connect` types the cluster client as `redis.Redis`, whose command methods it shares; code whose
commands must differ in Cluster mode asks `is_cluster(client)`.
"""

from __future__ import annotations

import functools
import re
import socket
import ssl
from typing import Any, TypeGuard, cast

import redis
from redis.asyncio.sentinel import MasterNotFoundError as AsyncMasterNotFoundError
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisClusterException
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError

from sidequest.errors import RedisUnavailableError, RedisURLError
from sidequest.store.reasons import reason
from sidequest.store.redaction import mask_url as mask_url  # its old home: imported from here too
from sidequest.store.redaction import redact
from sidequest.store.urls import (
    SENTINEL_PORT,
    URL_FORM,
    SentinelURL,
    check_url,
    is_cluster_url,
    is_sentinel_url,
    parse_cluster_url,
    parse_sentinel_url,
)

# A blocking fetch waits at most a few seconds; the socket timeout must be longer than any
# blocking call we make, or redis-py would cut a healthy BRPOP short.
SOCKET_TIMEOUT = 30.0
CONNECT_TIMEOUT = 5.0
# A TLS handshake is two round trips once TCP is up; a server that has not answered in this
# long is not speaking TLS (a plain Redis waits for the end of a command line).
HANDSHAKE_TIMEOUT = 3.0
# Bytes a connection of the sync clients reads from its socket at a time, into a buffer of its
# own, allocated (and zeroed) with the connection: redis-py 8's 32 KB per connection, times the
# two dozen connections of an idle worker (two per processor thread), was 0.8 MB of its RSS. A
# worker's replies are mostly far smaller; a longer one takes a few more reads.
READ_SIZE = 16 * 1024


# OpenSSL's reasons for a handshake answered with something that is not TLS (a plain Redis's
# "-ERR ..." line, say)
NOT_TLS_REASONS = frozenset({"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG",
                             "UNKNOWN_PROTOCOL"})


class NotTLSError(redis.ConnectionError):
    """The server behind a rediss:// URL does not speak TLS (see TLSConnection)."""


class _TCPStep(redis.Connection):
    """The TCP part of a TLSConnection's connect: notes that it succeeded, and bounds the TLS
    handshake that follows by HANDSHAKE_TIMEOUT, under whichever timeout redis-py runs it: up to
    8.1 the socket's own, from 8.2 `socket_connect_timeout` (which it sets on the socket just
    before the handshake; TLSConnection puts the connect bound back once it is done)."""

    tcp_connected = False

    def _connect(self) -> socket.socket:
        sock: socket.socket = super()._connect()  # type: ignore[no-untyped-call]  # untyped in redis-py
        sock.settimeout(HANDSHAKE_TIMEOUT)
        self.socket_connect_timeout = HANDSHAKE_TIMEOUT
        self.tcp_connected = True
        return sock


class TLSConnection(redis.SSLConnection, _TCPStep):
    """redis-py's TLS connection, with a short bound on the handshake.

    redis-py runs the handshake under the read timeout (SOCKET_TIMEOUT; from 8.2 under the
    connect timeout, CONNECT_TIMEOUT), so `rediss://` to a Redis without TLS, which waits for the
    end of a line that never comes, hung 30 s (5 s) and then said "timeout". Here the handshake
    gets HANDSHAKE_TIMEOUT, and no answer or an answer that is not TLS, once TCP is up, raises
    NotTLSError. (In the MRO, SSLConnection's call to the plain TCP connect lands in _TCPStep.)
    """

    def _connect(self) -> socket.socket:
        self.tcp_connected = False
        tcp_bound = self.socket_connect_timeout
        try:
            sock: socket.socket = super()._connect()  # type: ignore[no-untyped-call]  # untyped in redis-py
        except (TimeoutError, ssl.SSLError) as exc:
            if self.tcp_connected and (isinstance(exc, TimeoutError) or exc.reason in NOT_TLS_REASONS):
                raise NotTLSError(f"{self.host}:{self.port} did not answer TLS ({exc})") from None
            raise
        finally:
            self.socket_connect_timeout = tcp_bound  # the next connect's TCP step gets its own bound
        sock.settimeout(self.socket_timeout)
        return sock


def connect(url: str, *, check: bool = True, max_connections: int | None = None,
            socket_timeout: float = SOCKET_TIMEOUT) -> redis.Redis:
    """A client for `url`; with `check`, PING first and raise RedisUnavailableError on failure.

    The client never re-sends a command by itself (redis-py retries up to 10 times by default):
    a push, a fetch or a move whose reply was lost may have run, and sending it again could
    write a job twice. sidequest's callers decide instead: pushes raise, fetches reconcile their
    own reserved list (see `worker.fetch`), settling is idempotent. (The direct path sends a call again
    only when Redis provably never read it, see `idle`.)

    A small `max_connections` gives a thread that makes one call at a time (a processor) a pool
    of its own: no lock shared with nine other threads per call, and the connection is opened
    lazily, so a refused connection is an outage of that call, not of the constructor (but for
    a Cluster URL, see `connect_cluster`).
    """
    check_url(url)
    if is_cluster_url(url):  # typed as the plain client: see the module
        return cast(redis.Redis, connect_cluster(url, check=check, max_connections=max_connections,
                                                 socket_timeout=socket_timeout))
    if is_sentinel_url(url):
        client = sentinel_client(parse_sentinel_url(url), socket_timeout=socket_timeout,
                                 max_connections=max_connections)
        if check:
            ping(client, url)
        return client
    options = {**_quiet_options(), **_driver_options()}
    if not url.startswith("unix:"):
        options["socket_keepalive"] = True  # TCP only: unix sockets refuse the option
    if url.startswith("rediss:"):
        options["connection_class"] = TLSConnection
    try:
        client = redis.Redis.from_url(
            url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=min(CONNECT_TIMEOUT, socket_timeout),
            health_check_interval=30,
            max_connections=max_connections,
            retry=Retry(NoBackoff(), 0),
            socket_read_size=READ_SIZE,
            **options,
        )
    except ValueError as exc:
        raise RedisURLError(f"invalid Redis URL {mask_url(url)}: {redact(str(exc), url)}; "
                            f"the form is {URL_FORM}") from None
    if check:
        ping(client, url)
    return client


def connect_cluster(url: str, *, check: bool = True, max_connections: int | None = None,
                    socket_timeout: float = SOCKET_TIMEOUT) -> RedisCluster:
    """A client of the Redis Cluster `url` names (see module), set up as `connect` sets up a
    plain one. Building it reads the slot map, so RedisUnavailableError when no node answers,
    with `check` or without.

    redis-py follows MOVED, ASK and TRYAGAIN inside one call, whatever its `retry`; `retry`
    counts only the re-sends after a connection error, a timeout or CLUSTERDOWN, so 0 here.
    Its node clients re-send nothing either (redis-py sets their retries to 0).
    """
    parsed = parse_cluster_url(url)
    options = {**_quiet_options(), **_driver_options()}
    try:
        # no health_check_interval: RedisCluster drops it; no TLSConnection: its node clients
        # take no connection class, so `ssl` gets redis-py's own (no short TLS handshake bound)
        client = RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in parsed.nodes],  # type: ignore[no-untyped-call]
            username=parsed.username, password=parsed.password, ssl=parsed.tls,
            socket_timeout=socket_timeout,
            socket_connect_timeout=min(CONNECT_TIMEOUT, socket_timeout),
            socket_keepalive=True,
            max_connections=max_connections,  # per node
            retry=Retry(NoBackoff(), 0),
            socket_read_size=READ_SIZE,
            **options,
        )
    except (RedisClusterException, redis.RedisError, OSError) as exc:
        raise unavailable(exc, url) from None
    if check:
        ping(client, url)
    return client


def is_cluster(client: object) -> TypeGuard[RedisCluster]:
    """True for a client of a Redis Cluster (`connect` of a `redis+cluster://` URL)."""
    return isinstance(client, RedisCluster)


def sentinel_settings(url: SentinelURL,
                      socket_timeout: float = SOCKET_TIMEOUT) -> tuple[dict[str, Any], dict[str, Any]]:
    """The keyword arguments of redis-py's `Sentinel` for the Sentinels' connections, and of its
    `master_for` for the primary's, set up as `connect` sets up a plain client: keepalive,
    bounded timeouts. Without `retry`: the sync and asyncio clients each add their own, that
    re-sends nothing (see `connect`)."""
    timeouts: dict[str, Any] = {"socket_timeout": socket_timeout,
                                "socket_connect_timeout": min(CONNECT_TIMEOUT, socket_timeout)}
    asked: dict[str, Any] = {**timeouts, "ssl": url.tls}
    if url.sentinel_password is not None:
        asked.update(username=url.sentinel_username, password=url.sentinel_password)
    primary: dict[str, Any] = {**timeouts, "db": url.db, "username": url.username, "password": url.password,
                               "ssl": url.tls, "socket_keepalive": True, "health_check_interval": 30}
    return asked, primary


def sentinel_client(url: SentinelURL, *, socket_timeout: float = SOCKET_TIMEOUT,
                    max_connections: int | None = None) -> redis.Redis:
    """A client of the primary the Sentinels of `url` name (see module)."""
    from redis.sentinel import Sentinel

    asked, settings = sentinel_settings(url, socket_timeout)
    settings.update(socket_read_size=READ_SIZE, **_driver_options())
    if max_connections:
        settings["max_connections"] = max_connections
    sentinels = Sentinel(list(url.sentinels), sentinel_kwargs={**asked, "retry": Retry(NoBackoff(), 0)})  # type: ignore[no-untyped-call, unused-ignore]  # typed from redis-py 8.2
    primary: redis.Redis = sentinels.master_for(url.service, retry=Retry(NoBackoff(), 0), **settings)  # type: ignore[no-untyped-call, unused-ignore]
    return primary


@functools.cache
def _driver_options() -> dict[str, Any]:
    """What CLIENT SETINFO reports, worked out once: left to itself, redis-py 8 reads its own
    version from the installed package's metadata for every connection it opens (a millisecond
    each, and the email parser's modules loaded into the process for it). The same name and
    version, from `redis.__version__`; redis-py's own default with a redis-py that has no such
    `DriverInfo`."""
    try:
        from redis.driver_info import DriverInfo

        return {"driver_info": DriverInfo(lib_version=redis.__version__)}
    except (ImportError, TypeError):
        return {}


def _quiet_options() -> dict[str, Any]:
    """redis-py 7+: no maintenance-notification handshake (Redis Enterprise only; noisy at -v)."""
    try:
        from redis.maint_notifications import MaintNotificationsConfig
    except ImportError:
        return {}
    return {"maint_notifications_config": MaintNotificationsConfig(enabled=False)}


def ping(client: redis.Redis | RedisCluster, url: str) -> None:
    try:
        client.ping()
    except (redis.RedisError, RedisClusterException, OSError, ValueError) as exc:
        raise unavailable(exc, url) from None


def unavailable(exc: Exception, url: str) -> RedisUnavailableError:
    """The one-line error for what went wrong asking `url` something (see `ping`)."""
    where, said = mask_url(url), redact(reason(exc), url)  # redis-py's text may quote the URL
    if isinstance(exc, RedisClusterException):  # no node gave a slot map: the last one's reason is the cause
        if "Cluster mode is not enabled" in str(exc):
            return RedisURLError(f"{where} names a Redis that is not in cluster mode; use redis:// "
                                 "(or redis+sentinel://) for it")
        if isinstance(exc.__cause__, redis.RedisError | OSError):
            return unavailable(exc.__cause__, url)
    if is_sentinel_url(url):
        refused = _sentinel_refused(exc, url)
        if refused is not None:
            return refused
    if isinstance(exc, redis.AuthenticationError) or (
            isinstance(exc, redis.ResponseError) and any(w in said for w in ("NOAUTH", "WRONGPASS", "NOPERM"))):
        return RedisUnavailableError(f"Redis at {where} refused authentication: {said}")
    if isinstance(exc, redis.ResponseError | RedisClusterException):
        return RedisUnavailableError(f"Redis at {where} answered with an error: {said}")
    if isinstance(exc, NotTLSError):
        return RedisURLError(f"Redis at {where} did not answer TLS: if the server does not use TLS, "
                             "use redis:// instead of rediss://; else check the port")
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError | OSError):
        return RedisUnavailableError(f"cannot reach Redis at {where}: {said}")
    # e.g. InvalidResponse: an HTTP server, a database...
    return RedisURLError(f"{where} does not answer as a Redis server ({said}); check the host and port in REDIS_URL")


NO_PRIMARY = (MasterNotFoundError, AsyncMasterNotFoundError)  # the sync and the asyncio Sentinel's own classes


def _sentinel_refused(exc: Exception, url: str) -> RedisUnavailableError | None:
    """The error for a Sentinel URL whose Sentinels named no primary, in sidequest's words (not
    redis-py's message, which from 8.2 holds each Sentinel client's whole repr); None for others.
    A plain Redis in a Sentinel's place answers SENTINEL with "unknown command": redis-py up to
    8.1 raised that reply, 8.2 folds it into its "No master found"."""
    if not isinstance(exc, (redis.ResponseError, *NO_PRIMARY)):
        return None
    if re.search(r"unknown command ['`]sentinel['`]", str(exc), re.IGNORECASE):  # 6.2 quotes with backticks
        return not_a_sentinel(url)
    if not isinstance(exc, NO_PRIMARY):
        return None
    parsed = parse_sentinel_url(url)
    asked = ", ".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in parsed.sentinels)
    return RedisUnavailableError(f"cannot reach Redis at {mask_url(url)}: no Sentinel ({asked}) named a primary "
                                 f"for {parsed.service!r}; check that they run and monitor it by that name")


def not_a_sentinel(url: str) -> RedisURLError:
    """A Sentinel URL whose first address answers as a plain Redis (it knows no SENTINEL)."""
    parsed = parse_sentinel_url(url)
    host, port = parsed.sentinels[0]
    host = f"[{host}]" if ":" in host else host
    return RedisURLError(f"{mask_url(url)} names a Redis that is not a Sentinel: use redis://{host}:{port}/"
                         f"{parsed.db} for it, or list the Sentinels' addresses (port {SENTINEL_PORT} by default)")


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


MIN_VERSION = (6, 2)


def check_server(client: redis.Redis, url: str) -> list[str]:
    """Refuse a Redis older than 6.2 (RedisUnavailableError); return warnings to log.

    sidequest needs BLMOVE and LPOS (6.2). Like Sidekiq, it warns when Redis may evict keys:
    under memory pressure an eviction policy other than `noeviction` silently deletes jobs.
    """
    info: dict[str, Any] = client.info()
    problem = version_problem(str(info.get("redis_version", "0")))
    if problem is not None:
        raise RedisUnavailableError(f"Redis at {mask_url(url)} {problem}")
    policy = str(info.get("maxmemory_policy", "noeviction"))
    if policy != "noeviction":
        return [f"Redis at {mask_url(url)} has maxmemory-policy {policy}: under memory pressure it may "
                "delete jobs; set maxmemory-policy noeviction"]
    return []


def version_problem(version: str) -> str | None:
    """Why a server reporting `redis_version` cannot be used, or None (Valkey reports 7.2.x)."""
    parts = tuple(int(p) if p.isdigit() else 0 for p in version.split(".")[:2])
    if parts < MIN_VERSION:
        return f"is version {version}; sidequest needs Redis 6.2 or newer (or Valkey)"
    return None


# What a background loop (poller, recovery, periodic scheduler) counts as Redis being away, to
# wait out with back-off and one log line: a lost connection, and on a Redis Cluster a switch
# under way (CLUSTERDOWN, TRYAGAIN, MASTERDOWN, or no node giving a slot map).
OUTAGE_ERRORS: tuple[type[BaseException], ...] = (
    redis.ConnectionError, redis.TimeoutError, OSError, redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError, redis.exceptions.MasterDownError, RedisClusterException)
