"""Readiness: Redis answers and (for a worker) takes writes. One check, used by the worker's
`GET /ready`, `sidequest health --ready` (through `api.health`) and the dashboard's `/health`.

Each check returns a `Health`: whether it passed, and one line saying why.

    verdict = check_redis(probe_client(config), write=True)
    ready = Readiness(config, also=lambda: None)    # a long-lived prober: its client made once
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from sidequest.client.sync_client import Client
from sidequest.config import Config
from sidequest.errors import RedisUnavailableError
from sidequest.store import keys
from sidequest.store.connection import connect
from sidequest.store.reasons import reason
from sidequest.store.redaction import mask_url, redact

DEFAULT_TIMEOUT = 2.0  # seconds a probe waits for Redis: below a probe's own timeout
MARK_TTL_MS = 60_000  # the readiness check's written key expires after a minute


@dataclass(frozen=True)
class Health:
    ok: bool
    reason: str  # one line: what was found, or what is wrong


def this_host(config: Config) -> str:
    """The hostname this host's workers put in their identity (see `heartbeat.make_identity`)."""
    return config.hostname or socket.gethostname()


def probe_client(config: Config, timeout: float = DEFAULT_TIMEOUT) -> Client:
    """A client on the configured Redis whose every call gives up after `timeout` seconds, once:
    a probe must answer before its own deadline, not wait out a worker's long socket timeout."""
    return Client(config, redis_client=connect(config.url, check=False, socket_timeout=timeout))


def check_redis(client: Client, *, write: bool, where: str = "Redis") -> Health:
    """Redis answers PING and, with `write`, takes a write (a replica, a full server with
    `noeviction` or a read-only ACL user refuse it): a short-lived key, `keys.HEALTH`.

    The reason names Redis as `where` says: a probe's body (anyone who reaches the port reads
    it) says "Redis", with no URL; `sidequest health` names the URL, masked. No reason quotes a
    credential of the URL, whatever redis-py's error says."""
    url = client.config.url
    began = time.perf_counter()
    try:
        connection = client.redis
        connection.ping()
        if write:
            connection.set(keys.HEALTH, this_host(client.config), px=MARK_TTL_MS)
    except RedisUnavailableError as exc:  # the client's first connection: its message names the URL
        why = str(exc).replace(f"Redis at {mask_url(url)}", where).replace(mask_url(url), where)
    except redis.TimeoutError:
        why = f"{where} did not answer in time"
    except (redis.ConnectionError, OSError) as exc:
        why = f"cannot reach {where}: {reason(exc)}"
    except redis.RedisError as exc:
        why = f"{where} refused {'a write' if write else 'PING'}: {reason(exc)}"
    else:
        took = (time.perf_counter() - began) * 1000
        return Health(True, f"{where} answers{' and accepts writes' if write else ''} ({took:.1f} ms)")
    return Health(False, redact(why, url))


class Readiness:
    """A server's readiness probe (a worker's or a supervisor's `GET /ready`, the dashboard's
    `/health`): `check_redis` on a client of its own, made at the first call, with the probes'
    short timeouts; then `also()`, the server's own condition (None when it holds, else why not)."""

    def __init__(self, config: Config, also: Callable[[], str | None], *, write: bool = True) -> None:
        self.config = config
        self.also = also
        self.write = write
        self._client: Client | None = None

    def __call__(self) -> Health:
        if self._client is None:
            self._client = probe_client(self.config)
        verdict = check_redis(self._client, write=self.write)
        problem = self.also() if verdict.ok else None
        return verdict if problem is None else Health(False, problem)

    def close(self) -> None:
        if self._client is not None:
            self._client.redis.close()
