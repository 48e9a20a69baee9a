"""Rate limits shared by every process and host on one Redis, by Sidekiq Enterprise's kinds:

    stripe = sidequest.limiter.concurrent("stripe", 5)            # at most 5 inside at once
    geocode = sidequest.limiter.window("geocode", 100, per=60)    # at most 100 in any 60 s
    github = sidequest.limiter.bucket("github", 5000, "hour")     # 5000 per clock hour
    shopify = sidequest.limiter.leaky("shopify", 40, 20)          # a burst of 40, then 2 a second
    graphql = sidequest.limiter.points("graphql", 1000, 20)       # 1000 points, 50 back a second

    @sidequest.job
    def charge(order_id):
        with stripe:
            ...

Over the limit, `with` raises `OverLimit`, whose `delay` is the exact wait when the kind knows it
(all but concurrent). Raised in a job, the worker snoozes the job: it goes back to `schedule`
(see `Retrier.snooze`) that long ahead without spending a retry or counting a failure, and the
processor moves on to other work. Anywhere else it is an ordinary exception.

`wait_timeout` (every kind; default 0, unlike Enterprise's 5 s, so a processor never waits on a
limit: the job is snoozed instead): wait up to that long inside `with` for room before raising.
`async with limiter:` waits on the event loop instead. `concurrent`'s `lock_timeout` is
Enterprise's name for its `lease`. `unlimited()` admits all.

Every kind reads the Redis server's clock (TIME), so hosts whose clocks disagree share one limit,
and each keeps its state in one key (`keys.limit_*`): one slot of a Cluster.

On a client without Redis (`sidequest.testing`'s fake and inline modes: `Client.counts_limits`
is False) a limiter lets every entry through, so a test runs a limited job as it runs any other.

    base.py        what every kind shares: checks, the client, waiting under `wait_timeout`
    concurrent.py  holders with leases, extended by one thread per process
    rates.py       window, bucket, leaky and points, and their Lua
"""

from __future__ import annotations

import random

from sidequest.client.sync_client import Client
from sidequest.errors import OverLimit
from sidequest.features.limiter.base import UnlimitedLimiter
from sidequest.features.limiter.concurrent import ConcurrentLimiter
from sidequest.features.limiter.rates import BucketLimiter, LeakyLimiter, PointsEntry, PointsLimiter, WindowLimiter

__all__ = ["BucketLimiter", "ConcurrentLimiter", "LeakyLimiter", "OverLimit", "PointsEntry", "PointsLimiter",
           "UnlimitedLimiter", "WindowLimiter", "bucket", "concurrent", "leaky", "points", "unlimited", "window"]


def concurrent(name: str, limit: int, lease: float | None = None, *, lock_timeout: float | None = None,
               wait_timeout: float = 0.0, client: Client | None = None) -> ConcurrentLimiter:
    """At most `limit` holders of `name` at once, across every process on this Redis.

    `lease` (or Enterprise's name, `lock_timeout`; 60 s by default): seconds a slot outlives a
    process that died holding it (extended while held)."""
    if lease is not None and lock_timeout is not None and lease != lock_timeout:
        raise ValueError(f"limiter {name!r}: lease and lock_timeout name one setting; give one of them")
    chosen = lease if lease is not None else lock_timeout
    return ConcurrentLimiter(name, limit, 60.0 if chosen is None else chosen, client=client,
                             wait_timeout=wait_timeout)


def window(name: str, limit: int, per: float, *, wait_timeout: float = 0.0, client: Client | None = None,
           rng: random.Random | None = None) -> WindowLimiter:
    """At most `limit` entries into `name` in any `per` seconds, across every process."""
    return WindowLimiter(name, limit, per, client=client, rng=rng, wait_timeout=wait_timeout)


def bucket(name: str, limit: int, interval: float | str, *, wait_timeout: float = 0.0,
           client: Client | None = None, rng: random.Random | None = None) -> BucketLimiter:
    """At most `limit` entries per `interval` ('second', 'minute', 'hour', 'day' or seconds),
    counted per calendar interval: all `limit` are back when the next one starts (midnight UTC
    for 'day')."""
    return BucketLimiter(name, limit, interval, client=client, rng=rng, wait_timeout=wait_timeout)


def leaky(name: str, size: int, interval: float | str, *, wait_timeout: float = 0.0,
          client: Client | None = None, rng: random.Random | None = None) -> LeakyLimiter:
    """A leaky bucket: up to `size` entries at once, then one every `interval / size` seconds."""
    return LeakyLimiter(name, size, interval, client=client, rng=rng, wait_timeout=wait_timeout)


def points(name: str, points: int, interval: float | str, *, wait_timeout: float = 0.0,
           client: Client | None = None, rng: random.Random | None = None) -> PointsLimiter:
    """A leaky bucket of `points` that refills `points` per `interval`: enter with
    `within_limit(estimate=n)`, then call the `used(n)` it gives with what the call really cost."""
    return PointsLimiter(name, points, interval, client=client, rng=rng, wait_timeout=wait_timeout)


def unlimited() -> UnlimitedLimiter:
    """A limiter that admits every entry, for code that picks a limiter per case."""
    return UnlimitedLimiter()
