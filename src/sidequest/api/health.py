"""Health checks for containers, shared by `sidequest health` (exec probes) and the dashboard's
`GET /health` (HTTP probes).

    readiness   Redis answers, and (for a worker) takes writes: `check_redis`
    liveness    this host's worker processes beat: the one of an identity, each pid of a
                pidfile and its children, or any one of this hostname has a heartbeat at most
                `max_age` seconds old: `check_workers`

Each check returns a `Health`: whether it passed, and one line saying why.

    client = probe_client(Config.from_env())
    verdict = check_redis(client, write=True)
    print(verdict.reason); sys.exit(0 if verdict.ok else 1)

Liveness reads the heartbeats from Redis, so while Redis is down it fails too (nothing can
tell a live worker from a hung one then); probes give it room with their failure threshold.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis

from sidequest.api import Process, ProcessSet
from sidequest.client.sync_client import Client
from sidequest.config import Config
from sidequest.errors import RedisUnavailableError
from sidequest.store import keys
from sidequest.store.connection import connect, mask_url

DEFAULT_TIMEOUT = 2.0  # seconds a probe waits for Redis: below a probe's own timeout
MISSED_BEATS = 6  # a heartbeat older than this many intervals is stale by default
MARK_TTL_MS = 60_000  # the readiness check's written key expires after a minute


@dataclass(frozen=True)
class Health:
    ok: bool
    reason: str  # one line: what was found, or what is wrong


def default_max_age(config: Config) -> float:
    """How old a heartbeat may be and still count as fresh: `MISSED_BEATS` intervals, and never
    more than the TTL past which other processes count the process as dead."""
    return min(config.heartbeat_ttl, MISSED_BEATS * config.heartbeat_interval)


def this_host(config: Config) -> str:
    """The hostname this host's workers put in their identity (see `heartbeat.make_identity`)."""
    return config.hostname or socket.gethostname()


def probe_client(config: Config, timeout: float = DEFAULT_TIMEOUT) -> Client:
    """A client on the configured Redis whose every call gives up after `timeout` seconds, once:
    a probe must answer before its own deadline, not wait out a worker's long socket timeout."""
    return Client(config, redis_client=connect(config.url, check=False, socket_timeout=timeout))


def check_redis(client: Client, *, write: bool) -> Health:
    """Redis answers PING and, with `write`, takes a write (a replica, a full server with
    `noeviction` or a read-only ACL user refuse it): a short-lived key, `keys.HEALTH`."""
    where = f"Redis at {mask_url(client.config.url)}"
    began = time.perf_counter()
    try:
        connection = client.redis
        connection.ping()
        if write:
            connection.set(keys.HEALTH, this_host(client.config), px=MARK_TTL_MS)
    except RedisUnavailableError as exc:  # the client's first connection: its message names the URL
        return Health(False, str(exc))
    except redis.TimeoutError:
        return Health(False, f"{where} did not answer in time")
    except (redis.ConnectionError, OSError) as exc:
        return Health(False, f"cannot reach {where}: {exc}")
    except redis.RedisError as exc:
        return Health(False, f"{where} refused {'a write' if write else 'PING'}: {exc}")
    took = (time.perf_counter() - began) * 1000
    return Health(True, f"{where} answers{' and accepts writes' if write else ''} ({took:.1f} ms)")


def check_workers(client: Client, *, hostname: str, max_age: float, pids: set[int] | None = None,
                  identity: str | None = None, clock: Callable[[], float] = time.time) -> Health:
    """The worker process `identity`, or each of `pids` on `hostname`, or (neither given) any
    process of `hostname`, is registered and has beaten within `max_age` seconds."""
    if identity is not None:
        wanted = f"worker process {identity}"
    elif pids is not None:
        wanted = f"worker process of host {hostname} with pid {', '.join(map(str, sorted(pids)))}"
    else:
        wanted = f"worker process of host {hostname}"
    try:
        found = list(ProcessSet(client, clean=False))
    except (RedisUnavailableError, redis.RedisError, OSError) as exc:
        return Health(False, f"cannot read the worker heartbeats: {_one_line(exc)}")
    if identity is not None:
        chosen = [p for p in found if p.identity == identity]
    else:
        chosen = [p for p in found if p.hostname == hostname and (pids is None or p.pid in pids)]
    if not chosen:
        return Health(False, f"no {wanted} has a heartbeat in Redis")
    now = clock()
    # The freshest entry of each pid (of the whole host, without pids) decides: an earlier run
    # with the same pid (a restarted container's pid 1) stays registered, stale, until its TTL.
    groups: dict[int | None, list[Process]] = {}
    for process in chosen:
        groups.setdefault(process.pid if pids is not None else None, []).append(process)
    fresh = []
    for group in groups.values():
        best = max(group, key=lambda p: p.beat or 0.0)
        age = now - best.beat if best.beat is not None else None
        if age is None or age > max_age:
            last = "never beat" if age is None else f"last beat {age:.1f} s ago"
            return Health(False, f"worker process {best.identity} {last} (more than {max_age:g} s)")
        fresh += [p for p in group if p.beat is not None and now - p.beat <= max_age]
    count = f"{len(fresh)} worker process{'es' if len(fresh) != 1 else ''}"
    return Health(True, f"{count} beat within {max_age:g} s: {', '.join(p.identity for p in fresh)}")


def pidfile_pids(path: str) -> set[int]:
    """The pid in a worker's pidfile (`sidequest worker -P`) and its children's (the worker
    processes of a `--processes` supervisor); a LookupError saying why there is none running."""
    try:
        text = Path(path).read_text(encoding="ascii", errors="replace").strip()
    except FileNotFoundError:
        raise LookupError(f"no pidfile at {path}: the worker is not running (or writes it elsewhere)") from None
    except OSError as exc:
        raise LookupError(f"cannot read the pidfile {path}: {exc.strerror}") from None
    if not text.isdigit() or int(text) <= 0:
        raise LookupError(f"the pidfile {path} holds no process id") from None
    pid = int(text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise LookupError(f"process {pid} (from the pidfile {path}) is not running") from None
    except PermissionError:  # it runs, as another user
        pass
    return {pid, *_children(pid)}


def _children(parent: int) -> set[int]:
    """The processes whose parent is `parent`, from /proc (none where there is no /proc)."""
    found = set()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # it ended meanwhile
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (name) ": state, ppid, ...
        if len(fields) > 1 and fields[1] == str(parent):
            found.add(int(entry.name))
    return found


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
