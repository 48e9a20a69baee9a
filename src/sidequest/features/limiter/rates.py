"""The kinds that count entries over time: `window`, `bucket`, `leaky` and `points`.

Each entry is one Lua call that either records it or answers the exact wait until one fits
(`Limiter._admit` turns that into a sleep under `wait_timeout`, or `OverLimit.delay`):

- window: a sliding log (`keys.limit_window`) of the starts of the last `per` seconds, n at most.
  Exact in every span of `per` seconds, where a fixed counter lets 2n through around an edge.
- bucket: a counter for the current calendar interval (`keys.limit_bucket`: its number and
  count): n per interval, all n back at the interval's start (Sidekiq's "bucket").
- leaky and points: a leaky bucket (`keys.limit_leaky`, `keys.limit_points`: level and when it
  last drained) that drains `size` per `interval`, continuously. An entry adds its cost (1, or a
  points estimate) if it fits under `size`: a burst up to `size`, then a smooth rate. A points
  entry's `used(n)` corrects the level by `n - estimate` as it leaves (one more call).
"""

from __future__ import annotations

import logging
import os
import random
import secrets
from collections.abc import Callable
from types import TracebackType
from typing import Any, cast

import redis

from sidequest.client.sync_client import Client
from sidequest.features.limiter.base import Limiter, check, interval_seconds
from sidequest.store import keys

log = logging.getLogger(__name__)


class RateLimiter(Limiter):
    """A kind whose script answers {1} (in) or {0, seconds until room}."""

    script = ""
    key = ""
    per = 1.0  # the span the limit is spread over (a window, an interval, a drip)

    @property
    def spread(self) -> float:
        return min(1.0, self.per / 10)

    def _args(self) -> list[str | int | float]:
        raise NotImplementedError

    def _attempt(self) -> Callable[[], float | None] | None:
        return self._attempt_with(self._args())

    def _attempt_with(self, args: list[str | int | float]) -> Callable[[], float | None] | None:
        if not self.counts:
            return None
        run, key = self.redis.register_script(self.script), self.key

        def attempt() -> float | None:
            got = cast("list[Any]", run(keys=[key], args=args))
            return None if int(got[0]) == 1 else float(got[1])
        return attempt


class WindowLimiter(RateLimiter):
    """At most `limit` entries in any `per` seconds."""

    def __init__(self, name: str, limit: int, per: float, *, client: Client | None = None,
                 rng: random.Random | None = None, wait_timeout: float = 0.0) -> None:
        check(name, limit, per, "per")
        super().__init__(name, limit, client, wait_timeout, rng)
        self.per = float(per)
        self.key = keys.limit_window(name)
        self.script = WINDOW_ACQUIRE

    def _args(self) -> list[str | int | float]:
        return [f"{os.getpid()}:{secrets.token_hex(6)}", self.limit, self.per]


class BucketLimiter(RateLimiter):
    """At most `limit` entries per calendar `interval` (seconds, or 'second' ... 'day')."""

    def __init__(self, name: str, limit: int, interval: float | str, *, client: Client | None = None,
                 rng: random.Random | None = None, wait_timeout: float = 0.0) -> None:
        seconds = interval_seconds(name, interval)
        check(name, limit, seconds, "the interval")
        super().__init__(name, limit, client, wait_timeout, rng)
        self.interval = self.per = seconds
        self.key = keys.limit_bucket(name)
        self.script = BUCKET_ACQUIRE

    def _args(self) -> list[str | int | float]:
        return [self.limit, self.interval]


class LeakyLimiter(RateLimiter):
    """A bucket of `size` that drains `size` per `interval`: a burst of `size`, then one entry
    every `interval / size` seconds."""

    def __init__(self, name: str, size: int, interval: float | str, *, client: Client | None = None,
                 rng: random.Random | None = None, wait_timeout: float = 0.0) -> None:
        seconds = interval_seconds(name, interval)
        check(name, size, seconds, "the interval")
        super().__init__(name, size, client, wait_timeout, rng)
        self.interval = seconds
        self.per = seconds / size  # room for one more comes every drip
        self.key = self._key(name)
        self.script = DRIP

    @staticmethod
    def _key(name: str) -> str:
        return keys.limit_leaky(name)

    def _args(self, cost: int = 1) -> list[str | int | float]:
        return [self.limit, self.interval, cost, 0]  # a plain `with` costs 1


class PointsLimiter(LeakyLimiter):
    """A leaky bucket of `points` that refills `points` per `interval`. Enter with an estimate,
    then say what was used:

        with graphql.within_limit(estimate=50) as used:
            reply = call(...)
            used(reply.cost)

    A plain `with graphql:` takes one point."""

    @staticmethod
    def _key(name: str) -> str:
        return keys.limit_points(name)

    def within_limit(self, estimate: int = 1) -> PointsEntry:  # type: ignore[override]
        if isinstance(estimate, bool) or not isinstance(estimate, int) or not 0 <= estimate <= self.limit:
            raise ValueError(f"limiter {self.name!r}: an estimate of {estimate!r} never fits a bucket of "
                             f"{self.limit} points (give an integer from 0 to {self.limit})")
        return PointsEntry(self, estimate)

    def correct(self, delta: int) -> None:
        """Add `delta` points (less than zero: give some back), fit or not."""
        self.redis.register_script(DRIP)(keys=[self.key], args=[self.limit, self.interval, delta, 1])


class PointsEntry:
    """One `within_limit(estimate=...)` of a points limiter: takes the estimate on entry; `used(n)`
    inside sets what it really cost, corrected as the block ends."""

    def __init__(self, limiter: PointsLimiter, estimate: int) -> None:
        self.limiter = limiter
        self.estimate = estimate
        self.actual = estimate

    def used(self, points: int) -> None:
        if isinstance(points, bool) or not isinstance(points, int) or points < 0:
            raise ValueError(f"limiter {self.limiter.name!r}: used() takes a number of points of at least 0, "
                             f"got {points!r}")
        self.actual = points

    def __enter__(self) -> Callable[[int], None]:
        attempt = self.limiter._attempt_with(self.limiter._args(self.estimate))
        if attempt is not None:
            self.limiter._admit(attempt)
        return self.used

    async def __aenter__(self) -> Callable[[int], None]:
        attempt = self.limiter._attempt_with(self.limiter._args(self.estimate))
        if attempt is not None:
            await self.limiter._admit_async(attempt)
        return self.used

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.actual == self.estimate or not self.limiter.counts:
            return
        try:
            self.limiter.correct(self.actual - self.estimate)
        except (redis.RedisError, OSError) as error:  # the estimate stands; the block's own fate is kept
            log.warning("could not correct limiter %r by %d point(s) (%s); its estimate stands",
                        self.limiter.name, self.actual - self.estimate, error)

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.__exit__(kind, exc, tb)


# -- Lua --------------------------------------------------------------------------------------
# Times are the Redis server's (TIME), so processes on hosts whose clocks disagree share one
# limit. Each script touches one key, so a limiter lives in one slot of a Cluster, and keeps it
# alive only as long as its entries count.

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

# KEYS: sidequest:limit:bucket:<name> (hash: b = the interval's number, n = its entries)
# ARGV: limit, interval seconds. Interval b spans [b * interval, (b + 1) * interval) since the
# epoch; a count of an earlier interval is stale. Returns {1} or {0, seconds until the next one}.
BUCKET_ACQUIRE = """
local t = redis.call('time')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local interval = tonumber(ARGV[2])
local b = math.floor(now / interval)
local held = redis.call('hmget', KEYS[1], 'b', 'n')
local n = 0
if tonumber(held[1]) == b then n = tonumber(held[2]) end
local ends = (b + 1) * interval
if n >= tonumber(ARGV[1]) then
  return {0, tostring(ends - now)}
end
redis.call('hset', KEYS[1], 'b', string.format('%d', b), 'n', n + 1)
redis.call('pexpire', KEYS[1], math.ceil((ends - now) * 1000) + 1000)
return {1}
"""

# KEYS: sidequest:limit:leaky:<name> or :points:<name> (hash: level, at = when it last drained)
# ARGV: size, interval seconds, cost, force. Drain size/interval per second since `at`, then add
# `cost` if it fits under `size` (force = 1: add it anyway, a points correction, down to 0).
# Returns {1} or {0, seconds until `cost` fits}.
DRIP = """
local t = redis.call('time')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local size = tonumber(ARGV[1])
local rate = size / tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local held = redis.call('hmget', KEYS[1], 'level', 'at')
local level = 0
if held[1] then level = math.max(0, tonumber(held[1]) - (now - tonumber(held[2])) * rate) end
if ARGV[4] ~= '1' and level + cost > size then
  return {0, tostring((level + cost - size) / rate)}
end
level = math.max(0, level + cost)
redis.call('hset', KEYS[1], 'level', tostring(level), 'at', tostring(now))
redis.call('pexpire', KEYS[1], math.ceil(level / rate * 1000) + 1000)
return {1}
"""
