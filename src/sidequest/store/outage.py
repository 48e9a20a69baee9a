"""A Redis outage as a worker process sees it: logged once when it starts and once when it ends,
however many threads (or tasks) see it, with the back-off every caller waits between tries.

An outage ends with a success of a call that began after the last failure (a blocking fetch that
started before the outage and returns empty-handed proves nothing), and only once calls have gone
on succeeding for `OUTAGE_SETTLE` (5 s) with no new failure. A failover fails each connection made
before it, one by one as each is next used, and the Sentinels close the promoted replica's clients
(CLIENT KILL) just after calls start to reach it: a burst of failures in the first moments after
Redis answered is the same outage, not new ones, and logs nothing more.

An error reply to a core call (OOM, NOPERM, an unknown command, a Cluster error) waits the same
back-off but is told apart in the log: Redis answers, it refuses the call (READONLY stays an
outage: a replica answers for a primary that is gone). A feature's error never gets here: it is
that job's fault (`faults`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import redis
from redis.exceptions import RedisClusterException

from sidequest.store.reasons import reason

log = logging.getLogger(__name__)

BACKOFF_START, BACKOFF_MAX = 0.5, 5.0
REDIS_ERRORS = (redis.RedisError, OSError, RedisClusterException)  # the last: a cluster with no slot map
LOST = (redis.ConnectionError, redis.TimeoutError, OSError)  # a call that may have run, its reply lost
# An error reply (see module) is no outage: Redis answers, and refuses the call. It is retried
# with the same back-off, under its own line.
UNAVAILABLE = "Redis is unavailable (%s: %s); retrying with back-off until it answers"
REFUSED = "Redis refuses a call (%s: %s); it is retried with back-off until Redis accepts it"
OUTAGE_SETTLE = 5.0  # a failover's CLIENT KILLs came 1.2 s after the first success (a loaded 2-core test run)


def refused(exc: BaseException) -> bool:
    """An error reply, but READONLY: a replica answering for a primary that is gone (a failover)."""
    return isinstance(exc, redis.ResponseError) and not isinstance(exc, redis.ReadOnlyError)


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
        self._refused = False  # the episode began with an error reply, not a lost connection
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
                self._refused = refused(exc)
                log.error(REFUSED if self._refused else UNAVAILABLE, type(exc).__name__, reason(exc))

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

    def settle(self, *, answered: bool) -> None:
        """At a stop, end the outage in the log without waiting out the settling. `answered`:
        whether the stop's last call (clearing the heartbeat) reached Redis. Only then does the
        log say Redis answers again: a success reported before may have made no call (a job
        already in hand, handed out), so it cannot tell a stop that Redis is back."""
        with self._lock:
            if self._since is None:
                return
            if answered:
                if self._answered is None:
                    self._answered = self.clock()
                self._end()
                return
            log.warning("stopped during a Redis outage of %.1f s (%d failed calls)",
                        self.clock() - self._since, self._failures)
            self._since = self._answered = None
            self._failures = 0

    def _end(self) -> None:
        assert self._since is not None and self._answered is not None
        log.warning("Redis %s again after %.1f s (%d failed calls meanwhile)",
                    "accepts the calls" if self._refused else "answers", self._answered - self._since, self._failures)
        self._since = self._answered = None
        self._failures = 0


class Backoff:
    """The wait between tries of a failing fetch: BACKOFF_START, doubled at each failure up to
    BACKOFF_MAX, from the start again after a success. A processor thread's (`worker.processor`) and
    the asyncio runner's (`worker.fetch.loop_fetch`): so neither runner tries again at once."""

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
