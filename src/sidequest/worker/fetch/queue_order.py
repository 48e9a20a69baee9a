"""Which queues a fetch looks at, in what order: Sidekiq's `queues_cmd`.

With no weights, queues are tried in the order given (strict); with weights, each fetch
shuffles a list holding each queue `weight` times, so a queue comes first with probability
proportional to its weight. Paused queues (`sidequest:paused`) are left out.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import cast

import redis

from sidequest.config import Config
from sidequest.store import keys


class PausedQueues:
    """The names in `sidequest:paused`, read at most once a second for a whole process, so a
    paused queue is skipped by every worker within about a second (see `blocking_timeout`)."""

    def __init__(self, client: redis.Redis, every: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.redis = client
        self.every = every
        self.clock = clock
        self._names: frozenset[str] = frozenset()
        self._until = 0.0
        self._lock = threading.Lock()

    def names(self) -> frozenset[str]:
        if self.clock() >= self._until:
            with self._lock:
                if self.clock() >= self._until:
                    self._names = frozenset(n.decode() for n in cast("set[bytes]", self.redis.smembers(keys.PAUSED)))
                    self._until = self.clock() + self.every
        return self._names


class QueueOrder:
    """Sidekiq's queue ordering: strict as given, or a weighted shuffle per fetch; paused
    queues are left out."""

    def __init__(self, config: Config, rng: random.Random | None = None,
                 paused: PausedQueues | None = None, space: keys.Keyspace = keys.DEFAULT) -> None:
        self.strict = config.strict
        self.rng = rng or random.Random()
        self.paused = paused
        self.space = space
        self.keys = [space.queue(name) for name in dict.fromkeys(config.queue_names)]
        self.weighted = [space.queue(name) for name, weight in config.queues for _ in range(max(weight, 1))]

    def __call__(self) -> list[str]:
        if self.strict:
            order = self.keys
        else:
            shuffled = self.weighted[:]
            self.rng.shuffle(shuffled)
            order = list(dict.fromkeys(shuffled))
        paused = self.paused.names() if self.paused is not None else frozenset()
        return [key for key in order if self.space.queue_name(key) not in paused] if paused else order

    def spread(self) -> list[str]:
        """The queues an idle capsule's processors block on, one each: always in the same order
        (the shuffled fetch order would leave a queue without a waiter now and then, and a job
        pushed there would wait out a blocking timeout), paused queues left out."""
        paused = self.paused.names() if self.paused is not None else frozenset()
        return [key for key in self.keys if self.space.queue_name(key) not in paused] if paused else self.keys


def blocking_timeout(config: Config) -> float:
    """How long an idle fetch blocks: `fetch_timeout`, at most 1 s, so a pause takes effect
    within about a second even for a fetch already blocked on that queue."""
    return min(config.fetch_timeout, 1.0)


# An idle processor's blocking fetch times out after a random share of `blocking_timeout`, from
# 1 - BLOCK_JITTER to 1. With one fixed timeout a process's idle processors, which start (and
# after each round, meet in one RESERVE) together, woke together every second: ten threads handing
# the GIL round for a few milliseconds, and a job pushed then waited behind them (issue 41: about
# one idle job in a hundred; bench/tail.py counts the wake-ups). Spread, they seldom meet.
BLOCK_JITTER = 0.25


def blocking_wait(timeout: float, rng: random.Random) -> float:
    """One blocking fetch's timeout: `timeout` less up to BLOCK_JITTER of it, at random."""
    return timeout * (1 - BLOCK_JITTER * rng.random())


def wait_paused(seconds: float) -> None:
    """Every queue of this worker is paused: idle for a bounded time, then look again."""
    time.sleep(seconds)
