"""`concurrent`: at most n holders at once, across every process on one Redis (see the package).

A sorted set of holder tokens scored by lease expiry (`keys.limit_concurrent`). Entering is one
script (`LIMIT_ACQUIRE`): drop expired holders, then add ours if fewer than n remain. Leaving
removes it. While a slot is held, one daemon thread per process (`_Leases`) pushes its expiry to
now + `lease` every `lease`/3 seconds, so a long job keeps its slot, while a process that is
killed (or hangs) inside stops extending and loses its slot `lease` seconds later at most. That
is the one knob (Sidekiq Enterprise calls it `lock_timeout`): a pause longer than `lease` (a
stopped VM) can let one more in.
"""

from __future__ import annotations

import contextvars
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Self, cast

import redis

from sidequest.client.sync_client import Client
from sidequest.features.limiter.base import Limiter, check
from sidequest.store import keys
from sidequest.store.reasons import reason
from sidequest.worker.background.loop import Background

log = logging.getLogger(__name__)


class ConcurrentLimiter(Limiter):
    """At most `limit` inside at once (see the module). Safe to share between threads, processes
    and coroutines: each `with` holds a slot of its own."""

    exact = False  # a holder may leave any moment: a waiter asks again, with growing pauses

    def __init__(self, name: str, limit: int, lease: float = 60.0, *, client: Client | None = None,
                 wait_timeout: float = 0.0) -> None:
        check(name, limit, lease, "lease")
        super().__init__(name, limit, client, wait_timeout)
        self.lease = float(lease)
        self.key = keys.limit_concurrent(name)
        # the tokens this thread (or coroutine) holds, innermost last
        self._tokens: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
            f"sidequest_limit_{name}", default=())

    def __enter__(self) -> Self:
        token, attempt = self._start()
        if attempt is not None:
            self._admit(attempt)
        self._hold(token)
        return self

    async def __aenter__(self) -> Self:
        token, attempt = self._start()
        if attempt is not None:
            await self._admit_async(attempt)
        self._hold(token)
        return self

    def _start(self) -> tuple[str, Callable[[], float | None] | None]:
        """A new holder's token and its try at a slot ("" and None: this client counts nothing)."""
        if not self.counts:
            return "", None
        token = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(6)}"
        acquire = self.redis.register_script(LIMIT_ACQUIRE)

        def attempt() -> float | None:
            taken = acquire(keys=[self.key], args=[token, self.limit, self.lease])
            return None if int(cast("int", taken)) == 1 else 0.0
        return token, attempt

    def _hold(self, token: str) -> None:
        """Admitted: the slot's lease is extended until `__exit__` gives it back."""
        if token:
            _leases.add(token, _Lease(self, self.redis))
        self._tokens.set((*self._tokens.get(), token))  # "" holds nothing; its exit releases nothing

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
                    log.warning("could not extend the leases of limiter %r (%s); retrying", limiter.name, reason(exc))
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
