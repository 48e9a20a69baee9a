"""Rate limits shared by every process and host on one Redis: at most n at once, or n per window.

    stripe = sidequest.limiter.concurrent("stripe", 5)           # at most 5 inside at once
    geocode = sidequest.limiter.window("geocode", 100, per=60)   # at most 100 entries a minute

    @sidequest.job
    def charge(order_id):
        with stripe:
            ...

Over the limit, `with` raises `OverLimit`. Raised in a job, the worker snoozes the job: it goes
back to `schedule` (see `Retrier.snooze`) without spending a retry or counting a failure, and
the processor moves on to other work; nothing blocks or spins. Anywhere else it is an ordinary
exception.

`concurrent`: a sorted set of holder tokens scored by lease expiry (`keys.limit_concurrent`).
Entering is one script (`LIMIT_ACQUIRE`): drop expired holders, then add ours if fewer
than n remain. Leaving removes it. While a slot is held, one daemon thread per process
(`_Leases`) pushes its expiry to now + `lease` every `lease`/3 seconds, so a long job keeps its
slot, while a process that is killed (or hangs) inside stops extending and loses its slot
`lease` seconds later at most. That is the one knob: a pause longer than `lease` (a stopped VM)
can let one more in.

`window`: a sliding log (`keys.limit_window`): the start times of the last `per` seconds, one
zset entry each (n at most). Entering drops entries older than `per` and records this start if
fewer than n remain; otherwise the oldest entry says exactly when a start is allowed again,
and `OverLimit.delay` carries that wait. Exact in every window of `per` seconds, where a fixed
window counter (INCR with EXPIRE) would let 2n through around a window's edge. Leaving does
nothing: a window counts starts, not holders.

Both read the Redis server's clock (TIME), so hosts whose clocks disagree share one limit.

On a client without Redis (`sidequest.testing`'s fake and inline modes: `Client.counts_limits`
is False) a limiter lets every entry through, so a test runs a limited job as it runs any other.
"""

from __future__ import annotations

import contextvars
import logging
import math
import os
import random
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, cast

import redis

from sidequest.client.sync_client import Client, default_client
from sidequest.errors import OverLimit
from sidequest.store import keys
from sidequest.worker.background.loop import Background

log = logging.getLogger(__name__)

__all__ = ["ConcurrentLimiter", "OverLimit", "WindowLimiter", "concurrent", "window"]


def concurrent(name: str, limit: int, lease: float = 60.0, *, client: Client | None = None) -> ConcurrentLimiter:
    """At most `limit` holders of `name` at once, across every process on this Redis.

    `lease`: seconds a slot outlives a process that died holding it (extended while held)."""
    return ConcurrentLimiter(name, limit, lease, client=client)


def window(name: str, limit: int, per: float, *, client: Client | None = None,
           rng: random.Random | None = None) -> WindowLimiter:
    """At most `limit` entries into `name` in any `per` seconds, across every process."""
    return WindowLimiter(name, limit, per, client=client, rng=rng)


def _check(name: str, limit: int, seconds: float, what: str) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"a limiter needs a non-empty name, got {name!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limiter {name!r}: the limit must be an integer of at least 1, got {limit!r}")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < math.inf:
        raise ValueError(f"limiter {name!r}: {what} must be a positive number of seconds, got {seconds!r}")


class _Limiter:
    """What both kinds share: a name, a limit, and the Redis they count in."""

    def __init__(self, name: str, limit: int, client: Client | None) -> None:
        self.name = name
        self.limit = limit
        self._client = client

    @property
    def redis(self) -> redis.Redis:
        """The given client's Redis, else the default client's (`REDIS_URL`, `sidequest.configure`)."""
        return (self._client or default_client()).redis

    @property
    def counts(self) -> bool:
        """False on a client that has no Redis to count in (`sidequest.testing`): enter freely."""
        return (self._client or default_client()).counts_limits

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} limit={self.limit}>"


class ConcurrentLimiter(_Limiter):
    """At most `limit` inside at once (see the module). Safe to share between threads, processes
    and coroutines: each `with` holds a slot of its own."""

    def __init__(self, name: str, limit: int, lease: float = 60.0, *, client: Client | None = None) -> None:
        _check(name, limit, lease, "lease")
        super().__init__(name, limit, client)
        self.lease = float(lease)
        self.key = keys.limit_concurrent(name)
        # the tokens this thread (or coroutine) holds, innermost last
        self._tokens: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
            f"sidequest_limit_{name}", default=())

    def __enter__(self) -> ConcurrentLimiter:
        if not self.counts:
            self._tokens.set((*self._tokens.get(), ""))  # holds nothing; its exit releases nothing
            return self
        client = self.redis
        token = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(6)}"
        taken = client.register_script(LIMIT_ACQUIRE)(keys=[self.key], args=[token, self.limit, self.lease])
        if int(cast("int", taken)) != 1:
            raise OverLimit(self.name)
        _leases.add(token, _Lease(self, client))
        self._tokens.set((*self._tokens.get(), token))
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        held = self._tokens.get()
        if not held:
            return
        token = held[-1]
        self._tokens.set(held[:-1])
        if not token:
            return
        lease = _leases.remove(token)
        try:
            (lease.client if lease is not None else self.redis).zrem(self.key, token)
        except (redis.RedisError, OSError) as error:  # its lease ends it; the job's own fate stands
            log.warning("could not release a slot of limiter %r (%s); it frees when its lease "
                        "of %.0f s runs out", self.name, error, self.lease)

    def holders(self) -> list[str]:
        """The tokens (`host:pid:random`) holding a slot now, for a look at who is inside."""
        client = self.redis
        seconds, micros = client.time()
        now = seconds + micros / 1_000_000
        return [m.decode() for m in cast("list[bytes]", client.zrangebyscore(self.key, f"({now}", "+inf"))]

    def refresh(self, client: redis.Redis, tokens: list[str]) -> int:
        """Extend the leases of `tokens`; how many were still held."""
        script = client.register_script(LIMIT_REFRESH)
        return int(cast("int", script(keys=[self.key], args=[self.lease, *tokens])))


class WindowLimiter(_Limiter):
    """At most `limit` entries in any `per` seconds (see the module)."""

    def __init__(self, name: str, limit: int, per: float, *, client: Client | None = None,
                 rng: random.Random | None = None) -> None:
        _check(name, limit, per, "per")
        super().__init__(name, limit, client)
        self.per = float(per)
        self.key = keys.limit_window(name)
        self.rng = rng or random.Random()

    def __enter__(self) -> WindowLimiter:
        if not self.counts:
            return self
        token = f"{os.getpid()}:{secrets.token_hex(6)}"
        got = cast("list[Any]", self.redis.register_script(WINDOW_ACQUIRE)(
            keys=[self.key], args=[token, self.limit, self.per]))
        if int(got[0]) != 1:
            # the exact wait, plus a little jitter so the jobs snoozed together do not all come
            # back at the same instant for the one start that frees then
            wait = max(float(got[1]), 0.0)
            raise OverLimit(self.name, wait + self.rng.uniform(0, min(1.0, self.per / 10)))
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """A window counts entries, not holders: nothing to give back."""


# -- leases ------------------------------------------------------------------------------------
@dataclass
class _Lease:
    limiter: ConcurrentLimiter
    client: redis.Redis
    due: float = 0.0  # monotonic time of its next extension


class _Leases:
    """The slots this process holds, their leases extended by one daemon thread.

    Each held slot is extended every `lease`/3 seconds. The thread starts with the first slot
    taken in a process (again in a forked child, which holds none of its parent's slots) and
    sleeps while none is held. A Redis error is logged once and retried within a second.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._held: dict[str, _Lease] = {}
        self._lock = threading.Lock()
        self.background = Background("sidequest-limiter-leases", self.extend_due, what="extending limiter leases",
                                     retry=1.0, outage=())  # extend_due handles Redis errors per limiter
        self._pid = 0
        self._failing = False

    def add(self, token: str, lease: _Lease) -> None:
        lease.due = self.clock() + lease.limiter.lease / 3
        with self._lock:
            if self._pid != os.getpid():  # first use, or a forked child: its own thread, no slots
                self._held.clear()
                self.start()
            self._held[token] = lease
        self.background.wake()

    def remove(self, token: str) -> _Lease | None:
        with self._lock:
            return self._held.pop(token, None)

    def start(self) -> None:
        self._pid = os.getpid()
        self.background.start()

    def stop(self) -> None:
        self.background.stop()

    def extend_due(self) -> float:
        """Extend every lease that is due; seconds until the next one is."""
        now = self.clock()
        with self._lock:
            due = [(token, lease) for token, lease in self._held.items() if lease.due <= now]
        groups: dict[tuple[int, int], list[tuple[str, _Lease]]] = {}
        for token, lease in due:
            groups.setdefault((id(lease.limiter), id(lease.client)), []).append((token, lease))
        for group in groups.values():
            limiter, client = group[0][1].limiter, group[0][1].client
            tokens = [token for token, _ in group]
            try:
                kept = limiter.refresh(client, tokens)
            except (redis.RedisError, OSError) as exc:
                if not self._failing:
                    log.warning("could not extend the leases of limiter %r (%s); retrying", limiter.name, exc)
                self._failing = True
                for _, lease in group:
                    lease.due = now + min(1.0, limiter.lease / 10)
                continue
            self._failing = False
            with self._lock:  # a slot given back meanwhile is not a lost one
                lost = sum(token in self._held for token in tokens) - kept
            if lost > 0:
                log.warning("%d slot(s) of limiter %r expired before their lease was extended (a pause "
                            "longer than %.0f s?); the jobs inside carry on", lost, limiter.name, limiter.lease)
            for _, lease in group:
                lease.due = now + limiter.lease / 3
        with self._lock:
            nexts = [lease.due for lease in self._held.values()]
        return max(min(nexts) - self.clock(), 0.0) if nexts else 60.0


_leases = _Leases()


# -- Lua --------------------------------------------------------------------------------------
# Times are the Redis server's (TIME), so processes on hosts whose clocks disagree share one
# limit. Each script keeps its key alive only as long as its entries.

# KEYS: sidequest:limit:concurrent:<name> (zset: holder token -> lease expiry)
# ARGV: token, limit, lease seconds. Drop expired holders (their process died or hung), then take
# a slot if fewer than `limit` are held. Returns 1 (taken) or 0 (full).
LIMIT_ACQUIRE = """
local t = redis.call('time')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local lease = tonumber(ARGV[3])
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
if redis.call('zcard', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('zadd', KEYS[1], now + lease, ARGV[1])
redis.call('pexpire', KEYS[1], math.ceil(lease * 1000) + 1000)
return 1
"""

# KEYS: sidequest:limit:concurrent:<name>   ARGV: lease seconds, token...
# Extend the leases of slots still held (XX: a slot that expired meanwhile is not taken back).
# Returns how many were extended.
LIMIT_REFRESH = """
local t = redis.call('time')
local until_ = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[1])
local kept = 0
for i = 2, #ARGV do
  kept = kept + redis.call('zadd', KEYS[1], 'XX', 'CH', until_, ARGV[i])
end
if kept > 0 then
  redis.call('pexpire', KEYS[1], math.ceil(tonumber(ARGV[1]) * 1000) + 1000)
end
return kept
"""

# KEYS: sidequest:limit:window:<name> (zset: token -> start time)   ARGV: token, limit, per seconds
# A sliding log: forget starts older than `per`, then record this start if fewer than `limit`
# remain. Returns {1} (started) or {0, seconds until the oldest start leaves the window}.
WINDOW_ACQUIRE = """
local t = redis.call('time')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local per = tonumber(ARGV[3])
redis.call('zremrangebyscore', KEYS[1], '-inf', now - per)
if redis.call('zcard', KEYS[1]) >= tonumber(ARGV[2]) then
  local oldest = redis.call('zrange', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, tostring(tonumber(oldest[2]) + per - now)}
end
redis.call('zadd', KEYS[1], now, ARGV[1])
redis.call('pexpire', KEYS[1], math.ceil(per * 1000) + 1000)
return {1}
"""
