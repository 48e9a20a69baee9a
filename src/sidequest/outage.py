"""A Redis outage as a worker process sees it: logged once when it starts and once when it ends,
however many threads (or tasks) see it, with the back-off every caller waits between tries.

An outage ends with a success of a call that began after the last failure (a blocking fetch that
started before the outage and returns empty-handed proves nothing), and only once calls have gone
on succeeding for `OUTAGE_SETTLE` (5 s) with no new failure. A failover fails each connection made
before it, one by one as each is next used, and the Sentinels close the promoted replica's clients
(CLIENT KILL) just after calls start to reach it: a burst of failures in the first moments after
Redis answered is the same outage, not new ones, and logs nothing more.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import redis
from redis.exceptions import RedisClusterException

log = logging.getLogger(__name__)

BACKOFF_START, BACKOFF_MAX = 0.5, 5.0
REDIS_ERRORS = (redis.RedisError, OSError, RedisClusterException)  # the last: a cluster with no slot map
OUTAGE_SETTLE = 5.0  # a failover's CLIENT KILLs came 1.2 s after the first success (a loaded 2-core test run)


class RedisOutage:
    """One process's view of Redis: `down` on every failed call, `up` on every success (see
    module). `settle` logs the end of an outage that has ended, before the process stops."""

    def __init__(self, settle: float = OUTAGE_SETTLE, clock: Callable[[], float] = time.monotonic) -> None:
        self.settle_after = settle
        self.clock = clock
        self._since: float | None = None  # when the outage began; None: Redis answers
        self._answered: float | None = None  # the first success since the last failure
        self._last_failure = 0.0
        self._failures = 0
        self._lock = threading.Lock()

    def down(self, exc: BaseException) -> None:
        with self._lock:
            now = self.clock()
            if self._answered is not None and now - self._answered >= self.settle_after:
                self._end()  # the last outage had settled, unreported (no success came since): this is a new one
            self._failures += 1
            self._last_failure = now
            self._answered = None
            if self._since is None:
                self._since = self._last_failure
                log.error("Redis is unavailable (%s: %s); retrying with back-off until it answers",
                          type(exc).__name__, exc)

    def up(self, began: float) -> None:
        """A call that began at `began` (the clock's time) succeeded."""
        if self._since is None:
            return
        now = self.clock()
        with self._lock:
            if self._since is None or began <= self._last_failure:
                return
            if self._answered is None:
                self._answered = now
            if now - self._answered >= self.settle_after:
                self._end()

    def settle(self) -> None:
        """Log the end of an outage Redis has answered since, without waiting out the settling."""
        with self._lock:
            if self._since is not None and self._answered is not None:
                self._end()

    def _end(self) -> None:
        assert self._since is not None and self._answered is not None
        log.warning("Redis answers again after %.1f s (%d failed calls meanwhile)",
                    self._answered - self._since, self._failures)
        self._since = self._answered = None
        self._failures = 0


class Backoff:
    """The wait between tries of a failing fetch: BACKOFF_START, doubled at each failure up to
    BACKOFF_MAX, from the start again after a success. A processor thread's (`processor`) and
    the asyncio runner's (`loophub`): so neither runner tries again at once."""

    def __init__(self, start: float = BACKOFF_START, most: float = BACKOFF_MAX) -> None:
        self.start = self.delay = start
        self.most = most

    def failed(self) -> float:
        """A try failed: how long to wait before the next."""
        delay = self.delay
        self.delay = min(delay * 2, self.most)
        return delay

    def reset(self) -> None:
        self.delay = self.start
