"""Redis URLs as sidequest reads them: one Redis (redis://, rediss://, unix://), Sentinel
(`redis+sentinel://`) and Cluster (`redis+cluster://`), parsed and checked before any connection
is made, each refusal a `RedisURLError` naming the URL masked and the form it should take. The
connections are made in `connection`, which imports these names for its callers too.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

from sidequest.errors import RedisURLError
from sidequest.store.redaction import mask_url

URL_FORM = "redis://[[user]:password@]host[:port][/db] (rediss:// for TLS, unix:///path)"
SENTINEL_FORM = "redis+sentinel://[[user]:password@]host:port[,host:port...]/service[/db] (rediss+sentinel:// for TLS)"
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
SENTINEL_PORT = 26379
CLUSTER_FORM = "redis+cluster://[[user]:password@]host:port[,host:port...][/0] (rediss+cluster:// for TLS)"
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
PLAIN_SCHEMES = ("redis", "rediss", "unix")  # what redis-py's from_url reads
REDIS_PORT = 6379


@dataclass(frozen=True)
class SentinelURL:
    """A parsed `redis+sentinel://` URL (see module)."""

    sentinels: tuple[tuple[str, int], ...]  # (host, port) of each Sentinel, in the URL's order
    service: str  # the name the Sentinels monitor the primary by
    db: int
    username: str | None
    password: str | None = field(repr=False)  # never in a log line or a traceback's locals
    tls: bool
    sentinel_username: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)


def is_sentinel_url(url: str) -> bool:
    return url.partition("://")[0].lower() in SENTINEL_SCHEMES


@dataclass(frozen=True)
class ClusterURL:
    """A parsed `redis+cluster://` URL (see module)."""

    nodes: tuple[tuple[str, int], ...]  # (host, port) of the nodes first asked for the slot map
    username: str | None
    password: str | None = field(repr=False)
    tls: bool


def is_cluster_url(url: str) -> bool:
    return url.partition("://")[0].lower() in CLUSTER_SCHEMES


def _split_many_hosts(url: str) -> tuple[str, str, str, str, str]:
    """scheme, credentials (or ""), hosts, path, query of a Sentinel or Cluster URL, unparsed."""
    scheme, _, rest = url.partition("://")
    rest, _, query = rest.partition("?")
    netloc, slash, path = rest.partition("/")
    credentials, at, hosts = netloc.rpartition("@")
    return scheme.lower(), credentials if at else "", hosts, slash + path, query


def parse_sentinel_url(url: str) -> SentinelURL:
    """The parts of a `redis+sentinel://` URL; RedisURLError naming what is wrong."""
    scheme, credentials, hosts, path, query = _split_many_hosts(url)

    def refuse(why: str) -> RedisURLError:
        return RedisURLError(f"invalid Sentinel URL {mask_url(url)}: {why}; the form is {SENTINEL_FORM}")

    sentinels = _addresses(hosts, SENTINEL_PORT, "a Sentinel's", refuse)
    parts = [p for p in path.split("/") if p]
    if not parts:
        raise refuse("it names no service (the name in the Sentinels' `sentinel monitor` line)")
    if len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()):
        raise refuse(f"{path!r} is not /service or /service/db with a whole-number db")
    user, colon, password = credentials.partition(":")
    options = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
    unknown = set(options) - {"sentinel_username", "sentinel_password"}
    if unknown:
        raise refuse(f"unknown option {sorted(unknown)[0]!r} (known: sentinel_username, sentinel_password)")
    return SentinelURL(sentinels=sentinels, service=unquote(parts[0]),
                       db=int(parts[1]) if len(parts) == 2 else 0,
                       username=unquote(user) or None, password=unquote(password) if colon else None,
                       tls=scheme == "rediss+sentinel",
                       sentinel_username=options.get("sentinel_username") or None,
                       sentinel_password=options.get("sentinel_password") or None)


def parse_cluster_url(url: str) -> ClusterURL:
    """The parts of a `redis+cluster://` URL; RedisURLError naming what is wrong."""
    scheme, credentials, hosts, path, query = _split_many_hosts(url)

    def refuse(why: str) -> RedisURLError:
        return RedisURLError(f"invalid Redis Cluster URL {mask_url(url)}: {why}; the form is {CLUSTER_FORM}")

    nodes = _addresses(hosts, REDIS_PORT, "a node's", refuse)
    db = path.strip("/")
    if db.isdigit() and int(db) != 0:
        raise RedisURLError(f"invalid Redis Cluster URL {mask_url(url)}: a Redis Cluster has only database 0; "
                            f"remove /{db} from the URL")
    if db and not db.isdigit():
        raise refuse(f"{path!r} is not a database (a Cluster has only /0)")
    if query:
        raise refuse(f"unknown option {query.partition('=')[0]!r} (a Cluster URL takes none)")
    user, colon, password = credentials.partition(":")
    return ClusterURL(nodes=nodes, username=unquote(user) or None, password=unquote(password) if colon else None,
                      tls=scheme == "rediss+cluster")


def _addresses(hosts: str, default_port: int, whose: str,
               refuse: Callable[[str], RedisURLError]) -> tuple[tuple[str, int], ...]:
    """(host, port) of each item of `h1:p1,h2,[::1]:p3`."""
    found: list[tuple[str, int]] = []
    for item in hosts.split(","):
        host, port = item, str(default_port)
        if item.startswith("["):  # [::1]:26379
            host, _, tail = item[1:].partition("]")
            port = tail[1:] if tail.startswith(":") else port
        elif ":" in item:
            host, _, port = item.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise refuse(f"{item!r} is not {whose} host:port")
        found.append((unquote(host), int(port)))
    return tuple(found)


def check_url(url: str) -> None:
    """RedisURLError for what redis-py would silently get wrong: a database that is not a whole
    number (`redis://host:6379/abc` would quietly be database 0); a malformed Sentinel or Cluster URL."""
    if is_sentinel_url(url):
        parse_sentinel_url(url)
        return
    if is_cluster_url(url):
        parse_cluster_url(url)
        return
    parts = urlsplit(url)
    if parts.scheme.lower() not in PLAIN_SCHEMES:  # else redis-py says so only when first used
        raise RedisURLError(f"invalid Redis URL {mask_url(url)}: the scheme must be one of "
                            f"{', '.join(s + '://' for s in (*PLAIN_SCHEMES, *SENTINEL_SCHEMES, *CLUSTER_SCHEMES))}; "
                            f"the form is {URL_FORM}")
    if parts.scheme in ("redis", "rediss") and not re.fullmatch(r"/?[0-9]*", parts.path):
        raise RedisURLError(f"invalid Redis URL {mask_url(url)}: the database {parts.path[1:]!r} is not a whole "
                            f"number; the form is {URL_FORM}")
