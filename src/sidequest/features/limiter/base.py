"""What every limiter kind shares: its checks, the Redis it counts in, and `wait_timeout`.

Each kind's `_try()` makes one attempt (one Lua call) and says how it went; `_admit()` turns the
attempts into an entry or an `OverLimit`, waiting up to `wait_timeout` seconds in between. A kind
that knows when room comes (window, bucket, leaky, points) sleeps exactly until then, and raises
at once when that is later than the wait allows; a concurrent limiter cannot know when a holder
leaves, so it asks again after a pause that doubles up to `POLL_MAX`. Nothing spins.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Self

import redis

from sidequest.client.sync_client import Client, default_client
from sidequest.errors import OverLimit

# Sidekiq Enterprise's names for its intervals, in seconds. A bucket's intervals start at
# multiples of the interval since the epoch: a :day bucket resets at midnight UTC.
INTERVALS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}

POLL_FIRST, POLL_MAX = 0.05, 0.5  # a concurrent waiter's pauses between attempts


def check(name: str, limit: int, seconds: float, what: str) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"a limiter needs a non-empty name, got {name!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limiter {name!r}: the limit must be an integer of at least 1, got {limit!r}")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < math.inf:
        raise ValueError(f"limiter {name!r}: {what} must be a positive number of seconds, got {seconds!r}")


def interval_seconds(name: str, interval: float | str) -> float:
    """`interval` in seconds: a number, or Sidekiq's 'second', 'minute', 'hour', 'day'."""
    if isinstance(interval, str):
        if interval.lstrip(":") not in INTERVALS:
            raise ValueError(f"limiter {name!r}: the interval is a number of seconds or 'second', 'minute', "
                             f"'hour' or 'day', got {interval!r}")
        return INTERVALS[interval.lstrip(":")]
    return interval


def check_wait(name: str, wait_timeout: float) -> float:
    if isinstance(wait_timeout, bool) or not isinstance(wait_timeout, (int, float)) \
            or not 0 <= wait_timeout < math.inf:
        raise ValueError(f"limiter {name!r}: wait_timeout must be 0 or a positive number of seconds, "
                         f"got {wait_timeout!r}")
    return float(wait_timeout)


class Limiter:
    """What every kind shares: a name, a limit, the Redis it counts in, and how long to wait."""

    exact = True  # whether a refused attempt says when room comes (all but concurrent)

    def __init__(self, name: str, limit: int, client: Client | None, wait_timeout: float = 0.0,
                 rng: random.Random | None = None) -> None:
        self.name = name
        self.limit = limit
        self.wait_timeout = check_wait(name, wait_timeout)
        self.rng = rng or random.Random()
        self._client = client
        self.clock: Callable[[], float] = time.monotonic
        self.sleep: Callable[[float], None] = time.sleep

    @property
    def redis(self) -> redis.Redis:
        """The given client's Redis, else the default client's (`REDIS_URL`, `sidequest.configure`)."""
        return (self._client or default_client()).redis

    @property
    def counts(self) -> bool:
        """False on a client that has no Redis to count in (`sidequest.testing`): enter freely."""
        return (self._client or default_client()).counts_limits

    @property
    def spread(self) -> float:
        """The jitter added to a known wait, so jobs snoozed together do not all come back at one
        instant: a tenth of the span the limit is spread over, at most 1 s."""
        return 0.0

    def _pauses(self, attempt: Callable[[], float | None]) -> Iterator[float]:
        """The decisions of entering through `attempt` (None: admitted; else the seconds until
        room, if `exact`) within `wait_timeout`: the pauses to sleep between attempts, ending on
        admission, or OverLimit with the exact wait (and jitter). `_admit` and `_admit_async`
        only sleep them, on a thread or on the event loop."""
        deadline = self.clock() + self.wait_timeout
        pause = POLL_FIRST
        while True:
            wait = attempt()
            if wait is None:
                return
            left = deadline - self.clock()
            if self.exact:
                if wait > left:  # room comes too late for this wait: say when it comes
                    raise OverLimit(self.name, max(wait, 0.0) + self.rng.uniform(0, self.spread))
                yield max(wait, 0.0)
            else:
                if left <= 0:
                    raise OverLimit(self.name)
                yield min(pause, left)
                pause = min(pause * 2, POLL_MAX)

    def _admit(self, attempt: Callable[[], float | None]) -> None:
        for pause in self._pauses(attempt):
            self.sleep(pause)

    async def _admit_async(self, attempt: Callable[[], float | None]) -> None:
        for pause in self._pauses(attempt):
            await asyncio.sleep(pause)

    def within_limit(self) -> Self:
        """Sidekiq's spelling: `with limiter.within_limit():` is `with limiter:`."""
        return self

    def _attempt(self) -> Callable[[], float | None] | None:
        """One try at entering (one Lua call), or None on a client that counts nothing."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        attempt = self._attempt()
        if attempt is not None:
            self._admit(attempt)
        return self

    async def __aenter__(self) -> Self:
        """`async with`: the same short call on the event loop, but a wait (`wait_timeout`)
        sleeps without blocking the loop."""
        attempt = self._attempt()
        if attempt is not None:
            await self._admit_async(attempt)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """A rate counts entries, not holders: nothing to give back (concurrent overrides)."""

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.__exit__(kind, exc, tb)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} limit={self.limit}>"


class UnlimitedLimiter:
    """Admits every entry and touches no Redis: Sidekiq's `Limiter.unlimited`, for code that
    picks a limiter per case (`leaky(...) if metered else unlimited()`)."""

    name = "unlimited"

    def within_limit(self, estimate: int = 1) -> UnlimitedLimiter:
        return self

    def __enter__(self) -> Callable[[int], None]:
        return lambda used: None  # a points limiter's `used`, so either fits the same code

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None

    async def __aenter__(self) -> Callable[[int], None]:
        return self.__enter__()

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        return None

    def __repr__(self) -> str:
        return "<UnlimitedLimiter>"
