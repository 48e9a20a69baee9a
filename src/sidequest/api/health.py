"""Health checks for containers, shared by `sidequest health` (exec probes) and the dashboard's
`GET /health` (HTTP probes); a worker's own `GET /live` and `GET /ready` make the same checks
(`worker.probes`).

    liveness    local, no Redis: each worker process of this machine (or the one of a
                pidfile) wrote its liveness file lately and says it is live: `check_live`
    readiness   Redis answers, and (for a worker) takes writes: `check_redis`
    heartbeat   this host's worker processes beat in Redis: the one of an identity, each pid of a
                pidfile and its children, or any one of this hostname has a heartbeat at most
                `max_age` seconds old: `check_workers`

Each check returns a `Health`: whether it passed, and one line saying why.

    client = probe_client(Config.from_env())
    verdict = check_redis(client, write=True)
    print(verdict.reason); sys.exit(0 if verdict.ok else 1)

The heartbeat check reads Redis, so while Redis is down it fails too: it is no liveness probe
(a Redis outage must not restart every worker); liveness is `check_live`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import redis

from sidequest.api import Process, ProcessSet
from sidequest.client.sync_client import Client
from sidequest.config import Config
from sidequest.errors import RedisUnavailableError
from sidequest.worker.probes.readiness import (  # the worker's `/ready` makes the same check
    DEFAULT_TIMEOUT,
    MARK_TTL_MS,
    Health,
    Readiness,
    check_redis,
    probe_client,
    this_host,
)
from sidequest.worker.probes.state import judge as check_live

__all__ = ["DEFAULT_TIMEOUT", "MARK_TTL_MS", "Health", "Readiness", "check_live", "check_redis", "check_workers",
           "default_max_age", "pidfile_pid", "pidfile_pids", "probe_client", "this_host"]

MISSED_BEATS = 6  # a heartbeat older than this many intervals is stale by default


def default_max_age(config: Config) -> float:
    """How old a heartbeat may be and still count as fresh: `MISSED_BEATS` intervals, and never
    more than the TTL past which other processes count the process as dead."""
    return min(config.heartbeat_ttl, MISSED_BEATS * config.heartbeat_interval)


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
    pid = pidfile_pid(path)
    return {pid, *_children(pid)}


def pidfile_pid(path: str) -> int:
    """The pid in a worker's pidfile, running; a LookupError saying why there is none."""
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
    return pid


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
